package kafka

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	kafka "github.com/segmentio/kafka-go"
)

func testProducer(t *testing.T, maxRecord int) *Producer {
	t.Helper()
	p, err := NewProducer(ClientConfig{Brokers: []string{"127.0.0.1:9"}},
		ProducerOptions{Topic: "t", MaxRecordBytes: maxRecord})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.tr.CloseIdleConnections() })
	return p
}

func randomBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// feed runs records through an assembler as consecutive offsets from base.
func feed(a *assembler, base int64, recs []kafka.Message) []assembled {
	var out []assembled
	for i, m := range recs {
		m.Offset = base + int64(i)
		if d, ok := a.add(m); ok {
			out = append(out, d)
		}
	}
	return out
}

func TestFragmentRoundTrip(t *testing.T) {
	const max = 1000
	p := testProducer(t, max)
	r := rand.New(rand.NewPCG(1, 2))
	userHeaders := []kafka.Header{{Key: "content-type", Value: []byte("application/json")}}
	for _, size := range []int{0, 1, max - 1, max, max + 1, 2*max - 1, 2 * max, 2*max + 1, 5*max + 17} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			value := randomBytes(r, size)
			recs, err := p.toRecords(Message{Key: "doc-1", Value: value, Headers: userHeaders})
			if err != nil {
				t.Fatal(err)
			}
			wantN := 1
			if size > max {
				wantN = (size + max - 1) / max
			}
			if len(recs) != wantN {
				t.Fatalf("%d records, want %d", len(recs), wantN)
			}
			ids := map[string]bool{}
			for i, rec := range recs {
				if len(rec.Value) > max {
					t.Fatalf("record %d holds %d bytes, over %d", i, len(rec.Value), max)
				}
				if string(rec.Key) != "doc-1" {
					t.Fatalf("record %d key %q", i, rec.Key)
				}
				info := inspect(rec.Headers)
				if wantN == 1 {
					if info.kind != notFragment {
						t.Fatal("an unfragmented record carries fragment headers")
					}
					continue
				}
				if info.kind != isFragment || info.i != i || info.n != wantN {
					t.Fatalf("record %d: fragment info %+v", i, info)
				}
				ids[info.id] = true
			}
			if wantN > 1 && len(ids) != 1 {
				t.Fatalf("fragments carry %d ids, want 1", len(ids))
			}
			a := assembler{limit: 1 << 20, counters: &assemblyCounters{}}
			out := feed(&a, 100, recs)
			if len(out) != 1 {
				t.Fatalf("%d messages reassembled, want 1", len(out))
			}
			d := out[0]
			if !bytes.Equal(d.value, value) || d.first != 100 || d.last != 100+int64(wantN-1) {
				t.Fatalf("reassembled [%d,%d] %d bytes, want [100,%d] %d bytes", d.first, d.last, len(d.value), 100+wantN-1, size)
			}
			if len(d.headers) != 1 || d.headers[0].Key != "content-type" {
				t.Fatalf("headers %v, want only the user header", d.headers)
			}
			if a.pendingFrom() != -1 {
				t.Fatal("assembler still holds a sequence")
			}
		})
	}
}

// TestFragmentValueCopied checks that Send's records do not alias the caller's buffer.
func TestFragmentValueCopied(t *testing.T) {
	p := testProducer(t, 1000)
	v := bytes.Repeat([]byte("a"), 2500)
	recs, err := p.toRecords(Message{Value: v})
	if err != nil {
		t.Fatal(err)
	}
	v[0], v[2499] = 'X', 'X'
	if recs[0].Value[0] != 'a' || recs[2].Value[len(recs[2].Value)-1] != 'a' {
		t.Fatal("records share memory with the caller's Value")
	}
}

type seqRec struct {
	id   string // "" for a plain record
	i, n int
	val  string
	raw  []kafka.Header // used as is when set
}

func seqRecords(rs []seqRec) []kafka.Message {
	out := make([]kafka.Message, len(rs))
	for j, r := range rs {
		m := kafka.Message{Key: []byte("k"), Value: []byte(r.val), Headers: r.raw}
		if r.id != "" {
			m.Headers = []kafka.Header{
				{Key: HeaderFragment, Value: []byte(formatFragment(r.i, r.n))},
				{Key: HeaderFragmentID, Value: []byte(r.id)},
			}
		}
		out[j] = m
	}
	return out
}

func TestAssembler(t *testing.T) {
	const A, B = "aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb"
	type want struct {
		first, last int64
		val         string
	}
	cases := []struct {
		name    string
		recs    []seqRec
		want    []want
		pending int64 // pendingFrom at the end (offsets start at 0)
		stats   [4]int64
	}{
		{name: "plain records", recs: []seqRec{{val: "x"}, {val: "y"}},
			want: []want{{0, 0, "x"}, {1, 1, "y"}}, pending: -1},
		{name: "one sequence", recs: []seqRec{{id: A, i: 0, n: 3, val: "a"}, {id: A, i: 1, n: 3, val: "b"}, {id: A, i: 2, n: 3, val: "c"}},
			want: []want{{0, 2, "abc"}}, pending: -1},
		{name: "unfinished sequence is pending", recs: []seqRec{{val: "x"}, {id: A, i: 0, n: 3, val: "a"}, {id: A, i: 1, n: 3, val: "b"}},
			want: []want{{0, 0, "x"}}, pending: 1},
		{name: "retry repeats a prefix", recs: []seqRec{
			{id: A, i: 0, n: 3, val: "a"}, {id: A, i: 1, n: 3, val: "b"},
			{id: A, i: 0, n: 3, val: "a"}, {id: A, i: 1, n: 3, val: "b"}, {id: A, i: 2, n: 3, val: "c"}},
			want: []want{{2, 4, "abc"}}, pending: -1, stats: [4]int64{0, 0, 1, 0}},
		{name: "gap abandons, the retry delivers", recs: []seqRec{
			{id: A, i: 0, n: 3, val: "a"}, {id: A, i: 2, n: 3, val: "c"},
			{id: A, i: 0, n: 3, val: "a"}, {id: A, i: 1, n: 3, val: "b"}, {id: A, i: 2, n: 3, val: "c"}},
			want: []want{{2, 4, "abc"}}, pending: -1, stats: [4]int64{1, 1, 0, 0}},
		{name: "another message cuts in", recs: []seqRec{
			{id: A, i: 0, n: 2, val: "a"}, {id: B, i: 0, n: 2, val: "p"}, {id: B, i: 1, n: 2, val: "q"},
			{id: A, i: 1, n: 2, val: "b"}},
			want: []want{{1, 2, "pq"}}, pending: -1, stats: [4]int64{1, 1, 0, 0}},
		{name: "plain record cuts in", recs: []seqRec{
			{id: A, i: 0, n: 2, val: "a"}, {val: "x"}, {id: A, i: 1, n: 2, val: "b"}},
			want: []want{{1, 1, "x"}}, pending: -1, stats: [4]int64{1, 1, 0, 0}},
		{name: "orphans without a start", recs: []seqRec{
			{id: A, i: 1, n: 3, val: "b"}, {id: A, i: 2, n: 3, val: "c"}, {val: "x"}},
			want: []want{{2, 2, "x"}}, pending: -1, stats: [4]int64{0, 2, 0, 0}},
		{name: "changed count is a different sequence", recs: []seqRec{
			{id: A, i: 0, n: 3, val: "a"}, {id: A, i: 1, n: 2, val: "b"}},
			pending: -1, stats: [4]int64{1, 1, 0, 0}},
		{name: "single fragment", recs: []seqRec{{id: A, i: 0, n: 1, val: "solo"}},
			want: []want{{0, 0, "solo"}}, pending: -1},
		{name: "over the size limit", recs: []seqRec{
			{id: A, i: 0, n: 3, val: "aaaa"}, {id: A, i: 1, n: 3, val: "bbbb"}, {id: A, i: 2, n: 3, val: "cccc"}, {val: "x"}},
			want: []want{{3, 3, "x"}}, pending: -1, stats: [4]int64{1, 0, 0, 0}},
		{name: "malformed header is delivered as it is", recs: []seqRec{
			{raw: []kafka.Header{{Key: HeaderFragment, Value: []byte("01/2")}, {Key: HeaderFragmentID, Value: []byte(A)}}, val: "m"},
			{raw: []kafka.Header{{Key: HeaderFragment, Value: []byte("0/2")}}, val: "n"},
			{raw: []kafka.Header{{Key: HeaderFragment, Value: []byte("0/2")}, {Key: HeaderFragmentID, Value: []byte("AAAAAAAAAAAAAAAA")}}, val: "o"}},
			want: []want{{0, 0, "m"}, {1, 1, "n"}, {2, 2, "o"}}, pending: -1, stats: [4]int64{0, 0, 0, 3}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &assemblyCounters{}
			a := assembler{limit: 10, counters: c}
			out := feed(&a, 0, seqRecords(tc.recs))
			if len(out) != len(tc.want) {
				t.Fatalf("%d messages, want %d: %+v", len(out), len(tc.want), out)
			}
			for j, w := range tc.want {
				if out[j].first != w.first || out[j].last != w.last || string(out[j].value) != w.val {
					t.Errorf("message %d: [%d,%d] %q, want [%d,%d] %q", j, out[j].first, out[j].last, out[j].value, w.first, w.last, w.val)
				}
			}
			if got := a.pendingFrom(); got != tc.pending {
				t.Errorf("pendingFrom = %d, want %d", got, tc.pending)
			}
			got := [4]int64{c.abandoned.Load(), c.orphans.Load(), c.restarts.Load(), c.malformed.Load()}
			if got != tc.stats {
				t.Errorf("abandoned/orphans/restarts/malformed = %v, want %v", got, tc.stats)
			}
		})
	}
}

func TestParseFragment(t *testing.T) {
	good := map[string][2]int{"0/1": {0, 1}, "0/2": {0, 2}, "1/2": {1, 2}, "41/42": {41, 42}, "999999/1000000": {999999, 1000000}}
	for s, w := range good {
		i, n, err := parseFragment(s)
		if err != nil || i != w[0] || n != w[1] {
			t.Errorf("parseFragment(%q) = %d, %d, %v; want %d, %d", s, i, n, err, w[0], w[1])
		}
	}
	for _, s := range []string{"", "/", "0", "0/", "/1", "1/1", "2/1", "0/0", "-1/2", "+1/2", "01/2", "0/02",
		" 0/2", "0/2 ", "0/2/3", "a/2", "0/1000001", "0x1/2", "１/2", "99999999999999999999/1"} {
		if _, _, err := parseFragment(s); err == nil {
			t.Errorf("parseFragment(%q) accepted", s)
		}
	}
}

func TestFragmentID(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		id, err := newFragmentID()
		if err != nil {
			t.Fatal(err)
		}
		if !validFragmentID(id) || seen[id] {
			t.Fatalf("id %q invalid or repeated", id)
		}
		seen[id] = true
	}
	for _, s := range []string{"", "0123456789abcde", "0123456789abcdef0", "0123456789ABCDEF", "0123456789abcdeg"} {
		if validFragmentID(s) {
			t.Errorf("validFragmentID(%q) = true", s)
		}
	}
}

func FuzzFragmentHeader(f *testing.F) {
	for _, s := range []string{"0/1", "3/7", "01/2", "0/0", "-1/2", "1/1", "999999/1000000", "a/b", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		i, n, err := parseFragment(s)
		if err != nil {
			return
		}
		if i < 0 || n < 1 || i >= n || n > maxFragments {
			t.Fatalf("parseFragment(%q) = %d/%d out of range", s, i, n)
		}
		if back := formatFragment(i, n); back != s {
			t.Fatalf("parseFragment(%q) = %d/%d, which formats as %q", s, i, n, back)
		}
	})
}

// FuzzAssembler feeds arbitrary record sequences (plain records, fragments of two ids, broken
// headers) and checks what any sequence must satisfy: messages come out in offset order
// without overlap, a fragmented message is its fragments' values in order, and the pending
// offset never points past the record just read.
func FuzzAssembler(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7})
	f.Add([]byte{0x10, 0x11, 0x12, 0x10, 0x11, 0x12, 0x13})
	f.Add([]byte{0x23, 0x10, 0x81, 0x12, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		ids := []string{"00000000000000aa", "00000000000000bb"}
		a := assembler{limit: 64, counters: &assemblyCounters{}}
		last := int64(-1)
		for off, b := range data {
			var m kafka.Message
			m.Offset = int64(off)
			m.Value = []byte{b}
			switch b >> 6 {
			case 0, 1: // fragment (b>>4)&3 ... of n = b&3+1, id by bit 5
				n := int(b&3) + 1
				i := int(b>>2) & 3 % n
				m.Headers = []kafka.Header{
					{Key: HeaderFragment, Value: []byte(formatFragment(i, n))},
					{Key: HeaderFragmentID, Value: []byte(ids[(b>>5)&1])},
				}
			case 2: // broken header
				m.Headers = []kafka.Header{{Key: HeaderFragment, Value: []byte(strings.Repeat("9", int(b&7)))}}
			}
			d, ok := a.add(m)
			if p := a.pendingFrom(); p > m.Offset || (p >= 0 && p <= last) {
				t.Fatalf("offset %d: pendingFrom %d (last delivered %d)", off, p, last)
			}
			if !ok {
				continue
			}
			if d.first <= last || d.last != m.Offset || d.first > d.last {
				t.Fatalf("offset %d: message [%d,%d] after %d", off, d.first, d.last, last)
			}
			if d.first < d.last {
				if !bytes.Equal(d.value, data[d.first:d.last+1]) {
					t.Fatalf("message [%d,%d] value %v, want %v", d.first, d.last, d.value, data[d.first:d.last+1])
				}
				for _, h := range d.headers {
					if reservedHeader(h.Key) {
						t.Fatal("fragment header left on a reassembled message")
					}
				}
			}
			last = d.last
		}
	})
}

// FuzzFragmentHeaders feeds arbitrary fragment header values, present or not, among other
// headers: a record is a fragment only when both headers parse, and stripping leaves exactly
// the other headers.
func FuzzFragmentHeaders(f *testing.F) {
	f.Add("0/2", "0123456789abcdef", true, true)
	f.Add("1/2", "0123456789ABCDEF", true, true)
	f.Add("0/2", "", true, false)
	f.Add("", "0123456789abcdef", false, true)
	f.Fuzz(func(t *testing.T, frag, id string, hasFrag, hasID bool) {
		headers := []kafka.Header{{Key: "a", Value: []byte("1")}}
		if hasFrag {
			headers = append(headers, kafka.Header{Key: HeaderFragment, Value: []byte(frag)})
		}
		headers = append(headers, kafka.Header{Key: "b", Value: []byte("2")})
		if hasID {
			headers = append(headers, kafka.Header{Key: HeaderFragmentID, Value: []byte(id)})
		}
		info := inspect(headers)
		switch info.kind {
		case notFragment:
			if hasFrag || hasID {
				t.Fatal("fragment headers present but reported absent")
			}
		case isFragment:
			if !hasFrag || !hasID || !validFragmentID(id) || formatFragment(info.i, info.n) != frag || info.id != id {
				t.Fatalf("accepted frag %q id %q as %+v", frag, id, info)
			}
			rest := stripFragmentHeaders(headers, info)
			if len(rest) != 2 || rest[0].Key != "a" || rest[1].Key != "b" {
				t.Fatalf("stripped headers %v", rest)
			}
		case badFragment:
			if !hasFrag && !hasID {
				t.Fatal("no fragment headers but reported malformed")
			}
		}
	})
}

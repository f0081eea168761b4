package fragment

import (
	"bytes"
	"strings"
	"testing"

	kafka "github.com/segmentio/kafka-go"
)

// feed runs records through an assembler as consecutive offsets from base.
func feed(a *Assembler, base int64, recs []kafka.Message) []Message {
	var out []Message
	for i, m := range recs {
		m.Offset = base + int64(i)
		if d, ok := a.Add(m); ok {
			out = append(out, d)
		}
	}
	return out
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
				{Key: HeaderIndex, Value: []byte(Format(r.i, r.n))},
				{Key: HeaderID, Value: []byte(r.id)},
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
			{raw: []kafka.Header{{Key: HeaderIndex, Value: []byte("01/2")}, {Key: HeaderID, Value: []byte(A)}}, val: "m"},
			{raw: []kafka.Header{{Key: HeaderIndex, Value: []byte("0/2")}}, val: "n"},
			{raw: []kafka.Header{{Key: HeaderIndex, Value: []byte("0/2")}, {Key: HeaderID, Value: []byte("AAAAAAAAAAAAAAAA")}}, val: "o"}},
			want: []want{{0, 0, "m"}, {1, 1, "n"}, {2, 2, "o"}}, pending: -1, stats: [4]int64{0, 0, 0, 3}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &Counters{}
			a := NewAssembler(10, c)
			out := feed(a, 0, seqRecords(tc.recs))
			if len(out) != len(tc.want) {
				t.Fatalf("%d messages, want %d: %+v", len(out), len(tc.want), out)
			}
			for j, w := range tc.want {
				if out[j].First != w.first || out[j].Last != w.last || string(out[j].Value) != w.val {
					t.Errorf("message %d: [%d,%d] %q, want [%d,%d] %q", j, out[j].First, out[j].Last, out[j].Value, w.first, w.last, w.val)
				}
			}
			if got := a.PendingFrom(); got != tc.pending {
				t.Errorf("PendingFrom = %d, want %d", got, tc.pending)
			}
			got := [4]int64{c.Abandoned.Load(), c.Orphans.Load(), c.Restarts.Load(), c.Malformed.Load()}
			if got != tc.stats {
				t.Errorf("abandoned/orphans/restarts/malformed = %v, want %v", got, tc.stats)
			}
		})
	}
}

func TestParse(t *testing.T) {
	good := map[string][2]int{"0/1": {0, 1}, "0/2": {0, 2}, "1/2": {1, 2}, "41/42": {41, 42}, "999999/1000000": {999999, 1000000}}
	for s, w := range good {
		i, n, err := Parse(s)
		if err != nil || i != w[0] || n != w[1] {
			t.Errorf("Parse(%q) = %d, %d, %v; want %d, %d", s, i, n, err, w[0], w[1])
		}
	}
	for _, s := range []string{"", "/", "0", "0/", "/1", "1/1", "2/1", "0/0", "-1/2", "+1/2", "01/2", "0/02",
		" 0/2", "0/2 ", "0/2/3", "a/2", "0/1000001", "0x1/2", "１/2", "99999999999999999999/1"} {
		if _, _, err := Parse(s); err == nil {
			t.Errorf("Parse(%q) accepted", s)
		}
	}
}

func TestNewID(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		id, err := NewID()
		if err != nil {
			t.Fatal(err)
		}
		if !validID(id) || seen[id] {
			t.Fatalf("id %q invalid or repeated", id)
		}
		seen[id] = true
	}
	for _, s := range []string{"", "0123456789abcde", "0123456789abcdef0", "0123456789ABCDEF", "0123456789abcdeg"} {
		if validID(s) {
			t.Errorf("validID(%q) = true", s)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"0/1", "3/7", "01/2", "0/0", "-1/2", "1/1", "999999/1000000", "a/b", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		i, n, err := Parse(s)
		if err != nil {
			return
		}
		if i < 0 || n < 1 || i >= n || n > Max {
			t.Fatalf("Parse(%q) = %d/%d out of range", s, i, n)
		}
		if back := Format(i, n); back != s {
			t.Fatalf("Parse(%q) = %d/%d, which formats as %q", s, i, n, back)
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
		a := NewAssembler(64, &Counters{})
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
					{Key: HeaderIndex, Value: []byte(Format(i, n))},
					{Key: HeaderID, Value: []byte(ids[(b>>5)&1])},
				}
			case 2: // broken header
				m.Headers = []kafka.Header{{Key: HeaderIndex, Value: []byte(strings.Repeat("9", int(b&7)))}}
			}
			d, ok := a.Add(m)
			if p := a.PendingFrom(); p > m.Offset || (p >= 0 && p <= last) {
				t.Fatalf("offset %d: pendingFrom %d (last delivered %d)", off, p, last)
			}
			if !ok {
				continue
			}
			if d.First <= last || d.Last != m.Offset || d.First > d.Last {
				t.Fatalf("offset %d: message [%d,%d] after %d", off, d.First, d.Last, last)
			}
			if d.First < d.Last {
				if !bytes.Equal(d.Value, data[d.First:d.Last+1]) {
					t.Fatalf("message [%d,%d] value %v, want %v", d.First, d.Last, d.Value, data[d.First:d.Last+1])
				}
				for _, h := range d.Headers {
					if Reserved(h.Key) {
						t.Fatal("fragment header left on a reassembled message")
					}
				}
			}
			last = d.Last
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
			headers = append(headers, kafka.Header{Key: HeaderIndex, Value: []byte(frag)})
		}
		headers = append(headers, kafka.Header{Key: "b", Value: []byte("2")})
		if hasID {
			headers = append(headers, kafka.Header{Key: HeaderID, Value: []byte(id)})
		}
		info := Inspect(headers)
		switch info.Kind {
		case Plain:
			if hasFrag || hasID {
				t.Fatal("fragment headers present but reported absent")
			}
		case Part:
			if !hasFrag || !hasID || !validID(id) || Format(info.Index, info.Count) != frag || info.ID != id {
				t.Fatalf("accepted frag %q id %q as %+v", frag, id, info)
			}
			rest := strip(headers, info)
			if len(rest) != 2 || rest[0].Key != "a" || rest[1].Key != "b" {
				t.Fatalf("stripped headers %v", rest)
			}
		case Malformed:
			if !hasFrag && !hasID {
				t.Fatal("no fragment headers but reported malformed")
			}
		}
	})
}

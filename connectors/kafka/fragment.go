package kafka

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	kafka "github.com/segmentio/kafka-go"
)

// A logical message larger than the producer's MaxRecordBytes travels as n records, each
// carrying HeaderFragment "i/n" (i from 0) and the same HeaderFragmentID, written in order to one
// partition. A message that fits in one record carries neither header, so records from other
// producers (kcat, Java clients) read as ordinary one-record messages.
const (
	HeaderFragment   = "rp-frag"
	HeaderFragmentID = "rp-frag-id"
)

// maxFragments bounds n in "i/n": beyond it the header is treated as malformed rather than
// as a promise of an absurd number of records to come.
const maxFragments = 1_000_000

// fragmentIDLen is the length of a fragment id: 8 random bytes as lowercase hex.
const fragmentIDLen = 16

func newFragmentID() (string, error) {
	var b [fragmentIDLen / 2]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("kafka: fragment id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

func formatFragment(i, n int) string {
	return strconv.Itoa(i) + "/" + strconv.Itoa(n)
}

var errFragmentHeader = errors.New("malformed fragment header")

// parseFragment parses "i/n". It accepts only the canonical form formatFragment writes
// (decimal digits, no sign, no leading zeros), so that one header value means one thing.
func parseFragment(s string) (i, n int, err error) {
	a, b, ok := strings.Cut(s, "/")
	if !ok {
		return 0, 0, errFragmentHeader
	}
	if i, ok = parseCount(a); !ok {
		return 0, 0, errFragmentHeader
	}
	if n, ok = parseCount(b); !ok {
		return 0, 0, errFragmentHeader
	}
	if n < 1 || n > maxFragments || i >= n {
		return 0, 0, errFragmentHeader
	}
	return i, n, nil
}

func parseCount(s string) (int, bool) {
	if s == "" || len(s) > 7 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	v := 0
	for j := 0; j < len(s); j++ {
		c := s[j]
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	return v, true
}

func validFragmentID(s string) bool {
	if len(s) != fragmentIDLen {
		return false
	}
	for j := 0; j < len(s); j++ {
		c := s[j]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// reservedHeader reports whether a header name belongs to the fragment protocol, which user
// headers may not use: a stray "rp-frag" would make consumers try to reassemble the record.
func reservedHeader(key string) bool {
	return key == HeaderFragment || key == HeaderFragmentID
}

// splitValue cuts v into ceil(len(v)/max) consecutive pieces of at most max bytes. A value
// that fits comes back as the one piece, including nil (a tombstone) and empty.
func splitValue(v []byte, max int) [][]byte {
	if len(v) <= max {
		return [][]byte{v}
	}
	out := make([][]byte, 0, (len(v)+max-1)/max)
	for len(v) > max {
		out = append(out, v[:max:max])
		v = v[max:]
	}
	return append(out, v)
}

// fragmentInfo is what a record's headers say about fragmentation.
type fragmentInfo struct {
	kind  fragmentKind
	i, n  int
	id    string
	index [2]int // positions of the two fragment headers, for stripping
}

type fragmentKind int

const (
	notFragment fragmentKind = iota
	isFragment
	badFragment // carries a fragment header that does not parse
)

func inspect(headers []kafka.Header) fragmentInfo {
	info := fragmentInfo{index: [2]int{-1, -1}}
	var frag, id string
	for j, h := range headers {
		switch h.Key {
		case HeaderFragment:
			if info.index[0] >= 0 {
				info.kind = badFragment
				return info
			}
			info.index[0], frag = j, string(h.Value)
		case HeaderFragmentID:
			if info.index[1] >= 0 {
				info.kind = badFragment
				return info
			}
			info.index[1], id = j, string(h.Value)
		}
	}
	switch {
	case info.index[0] < 0 && info.index[1] < 0:
		return info
	case info.index[0] < 0 || info.index[1] < 0 || !validFragmentID(id):
		info.kind = badFragment
		return info
	}
	i, n, err := parseFragment(frag)
	if err != nil {
		info.kind = badFragment
		return info
	}
	info.kind, info.i, info.n, info.id = isFragment, i, n, id
	return info
}

func stripFragmentHeaders(headers []kafka.Header, info fragmentInfo) []kafka.Header {
	out := make([]kafka.Header, 0, len(headers))
	for j, h := range headers {
		if j != info.index[0] && j != info.index[1] {
			out = append(out, h)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// assemblyCounters are shared by all partitions of a consumer.
type assemblyCounters struct {
	abandoned atomic.Int64 // partial sequences given up: gap, interleaving, over the limit
	orphans   atomic.Int64 // fragments read with no sequence to join
	restarts  atomic.Int64 // sequences begun again by a fragment 0 of the same id
	malformed atomic.Int64 // records with fragment headers that do not parse
}

// assembler rebuilds logical messages from the records of one partition, read in offset order.
//
// The producer writes the fragments of a message in order to one partition and, when a write
// fails, retries the whole batch from fragment 0. So a sequence can be cut off by a failed
// write (a gap, or another message's records, follow), or repeated (0,1,0,1,2). Any sequence
// that does not continue exactly is abandoned, its records counted done; this never loses a
// message, because the same failure made the producer re-send every fragment from 0, and that
// later complete sequence is the one delivered. A fragment 0 always starts over.
type assembler struct {
	limit    int // largest logical value assembled; bigger sequences are abandoned
	counters *assemblyCounters

	active bool
	id     string
	n      int
	next   int   // fragment index expected next
	first  int64 // offset of fragment 0 of the active sequence
	buf    []byte
	over   bool // the active sequence went over limit; its remaining fragments are skipped
}

// assembled is one logical message, records [first, last].
type assembled struct {
	first, last int64
	key         []byte
	value       []byte
	headers     []kafka.Header
}

// pendingFrom is the offset of the first record held by an unfinished sequence, or -1.
// Nothing at or after it may be counted done.
func (a *assembler) pendingFrom() int64 {
	if a.active {
		return a.first
	}
	return -1
}

func (a *assembler) abandon() {
	if a.active {
		if !a.over {
			a.counters.abandoned.Add(1)
		}
		a.active, a.over, a.buf = false, false, nil
	}
}

// add feeds the next record; it returns the logical message m completes, if any.
func (a *assembler) add(m kafka.Message) (assembled, bool) {
	info := inspect(m.Headers)
	switch info.kind {
	case notFragment, badFragment:
		if info.kind == badFragment {
			a.counters.malformed.Add(1)
		}
		a.abandon()
		return assembled{first: m.Offset, last: m.Offset, key: m.Key, value: m.Value, headers: m.Headers}, true
	}
	if info.i == 0 {
		if a.active && a.id == info.id {
			a.counters.restarts.Add(1)
			a.active, a.over, a.buf = false, false, nil
		} else {
			a.abandon()
		}
		if info.n == 1 {
			return assembled{first: m.Offset, last: m.Offset, key: m.Key, value: m.Value,
				headers: stripFragmentHeaders(m.Headers, info)}, true
		}
		a.active, a.id, a.n, a.next, a.first = true, info.id, info.n, 1, m.Offset
		a.over = len(m.Value) > a.limit
		if a.over {
			a.counters.abandoned.Add(1)
			return assembled{}, false
		}
		// The total is about n full fragments; the cap keeps a hostile n from reserving memory.
		a.buf = make([]byte, 0, min(info.n*len(m.Value), a.limit))
		a.buf = append(a.buf, m.Value...)
		return assembled{}, false
	}
	if !a.active || a.id != info.id || a.n != info.n || a.next != info.i {
		a.abandon()
		a.counters.orphans.Add(1)
		return assembled{}, false
	}
	a.next++
	if !a.over && len(a.buf)+len(m.Value) > a.limit {
		a.over = true
		a.buf = nil
		a.counters.abandoned.Add(1)
	}
	if !a.over {
		a.buf = append(a.buf, m.Value...)
	}
	if a.next < a.n {
		return assembled{}, false
	}
	over, buf, first := a.over, a.buf, a.first
	a.active, a.over, a.buf = false, false, nil
	if over {
		return assembled{}, false
	}
	return assembled{first: first, last: m.Offset, key: m.Key, value: buf,
		headers: stripFragmentHeaders(m.Headers, info)}, true
}

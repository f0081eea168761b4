// Package fragment carries a logical message larger than one Kafka record as several
// records, and rebuilds it on the reading side.
//
// A message larger than the producer's record limit travels as n records, each carrying
// HeaderIndex "i/n" (i from 0) and the same HeaderID, written in order to one partition. A
// message that fits in one record carries neither header, so records from other producers
// (kcat, Java clients) read as ordinary one-record messages.
package fragment

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

// The fragment headers, part of the wire format (schemas/WIRE.md).
const (
	HeaderIndex = "rp-frag"    // "i/n": this record is fragment i of n
	HeaderID    = "rp-frag-id" // the same on every fragment of one message
)

// Max bounds n in "i/n": beyond it the header is treated as malformed rather than as a
// promise of an absurd number of records to come.
const Max = 1_000_000

// idLen is the length of a fragment id: 8 random bytes as lowercase hex.
const idLen = 16

// NewID returns a fresh random fragment id, the HeaderID value of one message's fragments.
func NewID() (string, error) {
	var b [idLen / 2]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("kafka: fragment id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// Format writes the HeaderIndex value of fragment i of n.
func Format(i, n int) string {
	return strconv.Itoa(i) + "/" + strconv.Itoa(n)
}

var errHeader = errors.New("malformed fragment header")

// Parse reads a HeaderIndex value "i/n". It accepts only the canonical form Format writes
// (decimal digits, no sign, no leading zeros), so that one header value means one thing.
func Parse(s string) (i, n int, err error) {
	a, b, ok := strings.Cut(s, "/")
	if !ok {
		return 0, 0, errHeader
	}
	if i, ok = parseCount(a); !ok {
		return 0, 0, errHeader
	}
	if n, ok = parseCount(b); !ok {
		return 0, 0, errHeader
	}
	if n < 1 || n > Max || i >= n {
		return 0, 0, errHeader
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

func validID(s string) bool {
	if len(s) != idLen {
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

// Reserved reports whether a header name belongs to the fragment protocol, which user
// headers may not use: a stray "rp-frag" would make consumers try to reassemble the record.
func Reserved(key string) bool {
	return key == HeaderIndex || key == HeaderID
}

// Split cuts v into ceil(len(v)/max) consecutive pieces of at most max bytes. A value
// that fits comes back as the one piece, including nil (a tombstone) and empty.
func Split(v []byte, max int) [][]byte {
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

// Info is what a record's headers say about fragmentation.
type Info struct {
	Kind         Kind
	Index, Count int    // "i/n", when Kind is Part
	ID           string // when Kind is Part
	at           [2]int // positions of the two fragment headers, for stripping
}

// Kind tells a fragment from a plain record.
type Kind int

const (
	Plain     Kind = iota // carries neither fragment header
	Part                  // one fragment of a message
	Malformed             // carries a fragment header that does not parse
)

// Inspect reads the fragment headers among headers.
func Inspect(headers []kafka.Header) Info {
	info := Info{at: [2]int{-1, -1}}
	var frag, id string
	for j, h := range headers {
		switch h.Key {
		case HeaderIndex:
			if info.at[0] >= 0 {
				info.Kind = Malformed
				return info
			}
			info.at[0], frag = j, string(h.Value)
		case HeaderID:
			if info.at[1] >= 0 {
				info.Kind = Malformed
				return info
			}
			info.at[1], id = j, string(h.Value)
		}
	}
	switch {
	case info.at[0] < 0 && info.at[1] < 0:
		return info
	case info.at[0] < 0 || info.at[1] < 0 || !validID(id):
		info.Kind = Malformed
		return info
	}
	i, n, err := Parse(frag)
	if err != nil {
		info.Kind = Malformed
		return info
	}
	info.Kind, info.Index, info.Count, info.ID = Part, i, n, id
	return info
}

func strip(headers []kafka.Header, info Info) []kafka.Header {
	out := make([]kafka.Header, 0, len(headers))
	for j, h := range headers {
		if j != info.at[0] && j != info.at[1] {
			out = append(out, h)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// Counters are shared by all partitions of a consumer.
type Counters struct {
	Abandoned atomic.Int64 // partial sequences given up: gap, interleaving, over the limit
	Orphans   atomic.Int64 // fragments read with no sequence to join
	Restarts  atomic.Int64 // sequences begun again by a fragment 0 of the same id
	Malformed atomic.Int64 // records with fragment headers that do not parse
}

// Assembler rebuilds logical messages from the records of one partition, read in offset order.
//
// The producer writes the fragments of a message in order to one partition and, when a write
// fails, retries the whole batch from fragment 0. So a sequence can be cut off by a failed
// write (a gap, or another message's records, follow), or repeated (0,1,0,1,2). Any sequence
// that does not continue exactly is abandoned, its records counted done; this never loses a
// message, because the same failure made the producer re-send every fragment from 0, and that
// later complete sequence is the one delivered. A fragment 0 always starts over.
type Assembler struct {
	limit    int // largest logical value assembled; bigger sequences are abandoned
	counters *Counters

	active bool
	id     string
	n      int
	next   int   // fragment index expected next
	first  int64 // offset of fragment 0 of the active sequence
	buf    []byte
	over   bool // the active sequence went over limit; its remaining fragments are skipped
}

// NewAssembler returns an Assembler that abandons messages longer than limit bytes and
// counts into counters.
func NewAssembler(limit int, counters *Counters) *Assembler {
	return &Assembler{limit: limit, counters: counters}
}

// Message is one logical message, records [First, Last]. Headers are the last record's, less
// the fragment headers of a reassembled message.
type Message struct {
	First, Last int64
	Key         []byte
	Value       []byte
	Headers     []kafka.Header
}

// PendingFrom is the offset of the first record held by an unfinished sequence, or -1.
// Nothing at or after it may be counted done.
func (a *Assembler) PendingFrom() int64 {
	if a.active {
		return a.first
	}
	return -1
}

func (a *Assembler) abandon() {
	if a.active {
		if !a.over {
			a.counters.Abandoned.Add(1)
		}
		a.active, a.over, a.buf = false, false, nil
	}
}

// Add feeds the next record; it returns the logical message m completes, if any.
func (a *Assembler) Add(m kafka.Message) (Message, bool) {
	info := Inspect(m.Headers)
	switch info.Kind {
	case Plain, Malformed:
		if info.Kind == Malformed {
			a.counters.Malformed.Add(1)
		}
		a.abandon()
		return Message{First: m.Offset, Last: m.Offset, Key: m.Key, Value: m.Value, Headers: m.Headers}, true
	}
	if info.Index == 0 {
		if a.active && a.id == info.ID {
			a.counters.Restarts.Add(1)
			a.active, a.over, a.buf = false, false, nil
		} else {
			a.abandon()
		}
		if info.Count == 1 {
			return Message{First: m.Offset, Last: m.Offset, Key: m.Key, Value: m.Value,
				Headers: strip(m.Headers, info)}, true
		}
		a.active, a.id, a.n, a.next, a.first = true, info.ID, info.Count, 1, m.Offset
		a.over = len(m.Value) > a.limit
		if a.over {
			a.counters.Abandoned.Add(1)
			return Message{}, false
		}
		// The total is about n full fragments; the cap keeps a hostile n from reserving memory.
		a.buf = make([]byte, 0, min(info.Count*len(m.Value), a.limit))
		a.buf = append(a.buf, m.Value...)
		return Message{}, false
	}
	if !a.active || a.id != info.ID || a.n != info.Count || a.next != info.Index {
		a.abandon()
		a.counters.Orphans.Add(1)
		return Message{}, false
	}
	a.next++
	if !a.over && len(a.buf)+len(m.Value) > a.limit {
		a.over = true
		a.buf = nil
		a.counters.Abandoned.Add(1)
	}
	if !a.over {
		a.buf = append(a.buf, m.Value...)
	}
	if a.next < a.n {
		return Message{}, false
	}
	over, buf, first := a.over, a.buf, a.first
	a.active, a.over, a.buf = false, false, nil
	if over {
		return Message{}, false
	}
	return Message{First: first, Last: m.Offset, Key: m.Key, Value: buf,
		Headers: strip(m.Headers, info)}, true
}

// Package chunk cuts a tokenized document into GN windows exactly as the REIGN reference does
// (Hugging Face "overflowing tokens"): every window is [CLS] + up to K-2 content tokens + [SEP],
// consecutive windows start S-2 content tokens apart, and the last window may be short.
package chunk

import (
	"encoding/binary"
	"fmt"

	"github.com/cespare/xxhash/v2"
)

// Params are the window settings. K is the window length including [CLS] and [SEP]; S is the
// stride argument of the reference (the step between windows is S-2 content tokens).
type Params struct {
	K int `yaml:"k" json:"k"`
	S int `yaml:"s" json:"s"`
}

// Default is the reference setting K=S=512 (no overlap).
var Default = Params{K: 512, S: 512}

// Validate rejects settings the reference cannot produce.
func (p Params) Validate() error {
	if p.K < 3 {
		return fmt.Errorf("chunk: K=%d: a window needs room for [CLS], [SEP] and one token (K >= 3)", p.K)
	}
	if p.S < 3 || p.S > p.K {
		return fmt.Errorf("chunk: S=%d: need 3 <= S <= K (K=%d)", p.S, p.K)
	}
	return nil
}

// Count is N, the number of windows for T content tokens:
// 1 if T <= K-2, else 1 + ceil((T-(K-2))/(S-2)).
func (p Params) Count(t int) int {
	l := p.K - 2
	if t <= l {
		return 1
	}
	step := p.S - 2
	return 1 + (t-l+step-1)/step
}

// Bounds returns the half-open content-token range [start, end) of window i of a T-token text.
func (p Params) Bounds(t, i int) (start, end int) {
	start = i * (p.S - 2)
	end = min(start+p.K-2, t)
	if start > t {
		start = t
	}
	return start, end
}

// Windows returns the window token ids of a text with content tokens ids: each window is
// cls + ids[start:end] + sep. Window slices share one backing array of the exact total size.
func (p Params) Windows(ids []int32, cls, sep int32) [][]int32 {
	n := p.Count(len(ids))
	total := 0
	for i := 0; i < n; i++ {
		s, e := p.Bounds(len(ids), i)
		total += e - s + 2
	}
	buf := make([]int32, 0, total)
	out := make([][]int32, n)
	for i := 0; i < n; i++ {
		s, e := p.Bounds(len(ids), i)
		from := len(buf)
		buf = append(buf, cls)
		buf = append(buf, ids[s:e]...)
		buf = append(buf, sep)
		out[i] = buf[from:len(buf):len(buf)]
	}
	return out
}

// Key is the window key: xxhash64 over (GN fingerprint, K, S, the window's token ids incl.
// [CLS]/[SEP]). Same key means same chunk vector, so writing a key twice is harmless.
func Key(fingerprint string, p Params, window []int32) uint64 {
	h := xxhash.New()
	var b [8]byte
	binary.LittleEndian.PutUint32(b[:4], uint32(len(fingerprint)))
	h.Write(b[:4])
	h.WriteString(fingerprint)
	binary.LittleEndian.PutUint32(b[:4], uint32(p.K))
	binary.LittleEndian.PutUint32(b[4:], uint32(p.S))
	h.Write(b[:])
	buf := make([]byte, 4*len(window))
	for i, id := range window {
		binary.LittleEndian.PutUint32(buf[4*i:], uint32(id))
	}
	h.Write(buf)
	return h.Sum64()
}

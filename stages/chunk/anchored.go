package chunk

// Anchored windows: an alternative to the reference's fixed windows for corpora that are
// re-ingested after small edits (a patent republished with one changed claim, a wiki page with
// one new paragraph). Fixed windows start every S-2 tokens from the document's first token, so
// one inserted or deleted token shifts every later window and the whole tail of the document
// gets new keys and is re-embedded. Anchored windows only start at paragraph boundaries, and
// whether a window ends after a paragraph is decided by that paragraph's own content, so an edit
// changes only the windows near it; the rest keep their keys and hit the window cache.
//
// Boundary rule (content-defined chunking, as in rsync / LBFS / FastCDC, at paragraph
// granularity instead of byte granularity):
//
//   - A paragraph longer than L = K-2 content tokens is a hard anchor: the window before it is
//     closed, it is cut into fixed pieces of L tokens starting at its own first token, and the
//     window after it starts fresh. Its pieces therefore depend on nothing around it.
//   - Any other paragraph P of n tokens is a "cut point" when hash(P's tokens) falls below a
//     threshold proportional to n: P(cut) = min(1, n/T) for a target T. Making the probability
//     proportional to n (rather than a fixed 1/M per paragraph) gives a constant cut rate per
//     token, so window sizes follow T whatever the paragraph-length distribution of the corpus
//     (claims are short lines, descriptions long paragraphs).
//   - A window ends after a cut point, or earlier when the next paragraph would overflow L.
//
// Locality: a window always ends right after a cut point (a cut point can only be the last
// paragraph of its window), so the windows between two consecutive cut points (or hard anchors)
// depend only on the paragraphs between them. An edit changes at most the segment it falls in,
// plus the neighbouring segment when it creates or removes a cut point; everything else keeps
// byte-identical windows. With T <= L most segments are one or two windows (overflow cuts
// inside a segment), so an edit typically re-embeds 1-3 windows.
//
// Cost: windows are shorter than fixed ones (a window closes at a cut point or before a
// paragraph that does not fit, so it is rarely full), so a first full pass embeds more windows:
// on the USPTO corpus 1.57x as many, 300 content tokens on average against 472. The content
// tokens are the same, so GN work grows less than the window count (per-window cost falls with
// length), but per-window overhead and padding in batches do grow. ops/editbench measures it.
// The mean-pooled document vector also differs from the reference's fixed windows, so anchored
// mode is an opt-in that trades reference parity for cheap re-ingestion.

import (
	"encoding/binary"
	"math/bits"
	"strings"

	"github.com/cespare/xxhash/v2"
)

// Paragraphs splits text at newlines into the units whose boundaries anchor windows (empty lines dropped).
func Paragraphs(text string) []string {
	var out []string
	for line := range strings.SplitSeq(text, "\n") {
		// Whitespace-only lines carry no tokens; dropping them keeps blank-line noise (e.g. "\r"
		// from CRLF text) from creating paragraphs, and they would add no tokens anyway.
		if strings.TrimSpace(line) == "" {
			continue
		}
		out = append(out, line)
	}
	return out
}

// DefaultAnchorTarget is the target T that AnchoredWindows uses: T = L = K-2, so a paragraph
// of n tokens is a cut point with probability n/L. Measured with ops/editbench on the USPTO
// corpus (364 patents, every one edited once, K=512): T=L/2 makes 2.05x the fixed windows and
// re-embeds 1.11 windows per edit; T=L makes 1.57x the windows and re-embeds 1.14; T=2L 1.37x
// and 1.22; no cut points at all (plain greedy) 1.16x and 1.40, and greedy has no bound on
// documents of many short paragraphs. Fixed windows re-embed 4.1 per edit (half of a patent).
// T=L buys nearly all of the locality for the smallest window overhead.
func DefaultAnchorTarget(p Params) int {
	return max(1, p.K-2)
}

// AnchoredWindows packs whole paragraphs (their content token ids, in order) greedily into windows of at most K-2 content tokens, each framed [CLS] ... [SEP]. A paragraph longer than K-2 tokens is cut into fixed pieces of K-2 tokens starting at its own first token (so its pieces don't depend on what precedes it), and the window after it starts fresh. Empty input gives one window [CLS][SEP] like the fixed mode.
//
// A window also ends after a content-defined cut point (see the package notes above), with
// target DefaultAnchorTarget(p). Params that fail Validate give nil: there is no error return,
// so callers validate first, as the pipeline does when it loads its config.
func (p Params) AnchoredWindows(paras [][]int32, cls, sep int32) [][]int32 {
	return p.AnchoredWindowsTarget(paras, cls, sep, DefaultAnchorTarget(p))
}

// AnchoredWindowsTarget is AnchoredWindows with an explicit target T (content tokens): a
// paragraph of n tokens is a cut point with probability min(1, n/T). Smaller T means more,
// shorter windows and fewer overflow cuts (better edit locality); T >= large values approach
// plain greedy packing. It exists so that ops/editbench can sweep T. Invalid Params or T < 1
// give nil.
func (p Params) AnchoredWindowsTarget(paras [][]int32, cls, sep int32, target int) [][]int32 {
	if p.Validate() != nil || target < 1 {
		return nil
	}
	// Exact total size, so that all windows share one backing array like Windows.
	total, count := 0, 0
	p.anchoredPlan(paras, target, func(span []int32) {
		total += len(span)
	}, func() {
		count++
	})
	if count == 0 {
		return [][]int32{{cls, sep}}
	}
	buf := make([]int32, 0, total+2*count)
	out := make([][]int32, 0, count)
	from := -1
	p.anchoredPlan(paras, target, func(span []int32) {
		if from < 0 {
			from = len(buf)
			buf = append(buf, cls)
		}
		buf = append(buf, span...)
	}, func() {
		buf = append(buf, sep)
		out = append(out, buf[from:len(buf):len(buf)])
		from = -1
	})
	return out
}

// anchoredPlan walks the paragraphs and reports the window layout: add appends content tokens
// to the current window, end closes it. Both passes of AnchoredWindowsTarget share it so that
// sizing and filling cannot disagree. end is never called for a window without content.
func (p Params) anchoredPlan(paras [][]int32, target int, add func([]int32), end func()) {
	l := p.K - 2
	cur := 0 // content tokens in the open window
	closeWin := func() {
		if cur > 0 {
			end()
			cur = 0
		}
	}
	for _, para := range paras {
		n := len(para)
		switch {
		case n == 0:
			// Paragraphs without tokens (only characters the tokenizer drops) must not
			// influence boundaries: skipping them keeps the layout equal to that of the text
			// without them.
			continue
		case n > l:
			closeWin()
			for s := 0; s < n; s += l {
				add(para[s:min(s+l, n)])
				cur = min(s+l, n) - s
				closeWin()
			}
			continue
		}
		if cur+n > l {
			closeWin()
		}
		add(para)
		cur += n
		if isCutPoint(para, target) {
			closeWin()
		}
	}
	closeWin()
}

// isCutPoint decides from a paragraph's tokens alone whether a window must end after it:
// true with probability min(1, n/target) over the hash, so the cut rate is per token.
func isCutPoint(para []int32, target int) bool {
	n := uint64(len(para))
	t := uint64(target)
	if n >= t {
		return true
	}
	h := xxhash.New()
	var b [4]byte
	for _, id := range para {
		binary.LittleEndian.PutUint32(b[:], uint32(id))
		h.Write(b[:])
	}
	// hash/2^64 < n/t  <=>  hash*t < n*2^64, compared exactly in 128 bits.
	hi, _ := bits.Mul64(h.Sum64(), t)
	return hi < n
}

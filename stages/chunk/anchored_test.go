package chunk

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/reignpipe/reignpipe/internal/testenv"
	"github.com/reignpipe/reignpipe/stages/wordpiece"
)

const cls, sep = 101, 102

// noCuts disables content-defined cut points, leaving plain greedy packing, so that
// expected layouts can be written down by hand.
const noCuts = 1 << 40

// para returns n distinct content ids starting at base.
func para(base, n int) []int32 {
	s := make([]int32, n)
	for i := range s {
		s[i] = int32(base + i)
	}
	return s
}

func TestParagraphs(t *testing.T) {
	cases := []struct {
		name, text string
		want       []string
	}{
		{"empty", "", nil},
		{"only newlines", "\n\n\n", nil},
		{"one line", "a b", []string{"a b"}},
		{"sections joined by blank lines", "T\n\nA\n\nc1\nc2", []string{"T", "A", "c1", "c2"}},
		{"whitespace-only lines dropped", "a\n  \t\n\r\nb", []string{"a", "b"}},
		{"leading and trailing newline", "\na\n", []string{"a"}},
		{"CRLF keeps the CR inside the line", "a\r\nb", []string{"a\r", "b"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Paragraphs(c.text); !slices.Equal(got, c.want) {
				t.Fatalf("Paragraphs(%q) = %q, want %q", c.text, got, c.want)
			}
		})
	}
}

// frame builds the expected window [CLS] parts... [SEP].
func frame(parts ...[]int32) []int32 {
	w := []int32{cls}
	for _, p := range parts {
		w = append(w, p...)
	}
	return append(w, sep)
}

func TestAnchoredWindowsLayout(t *testing.T) {
	p := Params{K: 10, S: 10} // L = 8 content tokens
	a, b, c := para(1000, 3), para(2000, 4), para(3000, 2)
	huge := para(5000, 20)
	exact := para(6000, 8)
	tiny := make([][]int32, 20)
	for i := range tiny {
		tiny[i] = para(7000+10*i, 1)
	}
	cases := []struct {
		name   string
		paras  [][]int32
		target int
		want   [][]int32
	}{
		{"nil input", nil, noCuts, [][]int32{{cls, sep}}},
		{"only empty paragraphs", [][]int32{{}, nil}, noCuts, [][]int32{{cls, sep}}},
		{"greedy packing", [][]int32{a, b, c}, noCuts, [][]int32{frame(a, b), frame(c)}},
		{"empty paragraphs ignored", [][]int32{a, {}, b, nil, c}, noCuts, [][]int32{frame(a, b), frame(c)}},
		{"paragraph of exactly L fits alone", [][]int32{a, exact, c}, noCuts,
			[][]int32{frame(a), frame(exact), frame(c)}},
		{"single huge paragraph", [][]int32{huge}, noCuts,
			[][]int32{frame(huge[:8]), frame(huge[8:16]), frame(huge[16:])}},
		{"huge paragraph closes the window before and after", [][]int32{a, huge, c}, noCuts,
			[][]int32{frame(a), frame(huge[:8]), frame(huge[8:16]), frame(huge[16:]), frame(c)}},
		{"many tiny paragraphs fill windows", tiny, noCuts,
			[][]int32{frame(tiny[0:8]...), frame(tiny[8:16]...), frame(tiny[16:]...)}},
		{"target 1 makes every paragraph a cut point", [][]int32{a, b, c}, 1,
			[][]int32{frame(a), frame(b), frame(c)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := p.AnchoredWindowsTarget(c.paras, cls, sep, c.target)
			if !slices.EqualFunc(got, c.want, slices.Equal) {
				t.Fatalf("got %v\nwant %v", got, c.want)
			}
		})
	}
}

func TestAnchoredWindowsRejectsBadSettings(t *testing.T) {
	paras := [][]int32{para(1, 5)}
	cases := []struct {
		name   string
		p      Params
		target int
	}{
		{"K too small", Params{K: 2, S: 2}, 10},
		{"S out of range", Params{K: 10, S: 11}, 10},
		{"zero value params", Params{}, 10},
		{"target zero", Params{K: 10, S: 10}, 0},
		{"target negative", Params{K: 10, S: 10}, -3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := c.p.AnchoredWindowsTarget(paras, cls, sep, c.target); got != nil {
				t.Fatalf("got %v, want nil", got)
			}
		})
	}
	if got := (Params{}).AnchoredWindows(paras, cls, sep); got != nil {
		t.Fatalf("AnchoredWindows with zero Params = %v, want nil", got)
	}
}

// randomDoc draws paragraph lengths shaped like patent text: mostly short to medium lines,
// some long description paragraphs, an occasional one longer than a window. Token ids are
// random so that paragraph hashes are independent.
func randomDoc(r *rand.Rand, n int) [][]int32 {
	doc := make([][]int32, n)
	for i := range doc {
		var l int
		switch x := r.IntN(100); {
		case x < 50:
			l = 5 + r.IntN(60)
		case x < 95:
			l = 60 + r.IntN(200)
		default:
			l = 300 + r.IntN(900)
		}
		doc[i] = randomPara(r, l)
	}
	return doc
}

func randomPara(r *rand.Rand, n int) []int32 {
	s := make([]int32, n)
	for i := range s {
		s[i] = 1000 + r.Int32N(29000)
	}
	return s
}

// checkInvariants verifies what every anchored layout promises: framing, size, all content in
// order exactly once, short paragraphs never split, long ones cut at multiples of L from their
// own first token.
func checkInvariants(t *testing.T, p Params, paras [][]int32, ws [][]int32) {
	t.Helper()
	l := p.K - 2
	var want, got []int32
	for _, pa := range paras {
		want = append(want, pa...)
	}
	// starts holds the content offsets at which some window begins.
	starts := map[int]bool{}
	for i, w := range ws {
		if len(w) > p.K || len(w) < 2 || w[0] != cls || w[len(w)-1] != sep {
			t.Fatalf("%+v window %d: bad frame or size %d", p, i, len(w))
		}
		if len(w) == 2 && len(want) > 0 {
			t.Fatalf("%+v window %d empty in a non-empty document", p, i)
		}
		starts[len(got)] = true
		got = append(got, w[1:len(w)-1]...)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%+v: windows' content (%d tokens) != paragraphs' content (%d tokens)", p, len(got), len(want))
	}
	off := 0
	for _, pa := range paras {
		n := len(pa)
		for j := 1; j < n; j++ {
			inside := starts[off+j]
			if n <= l && inside {
				t.Fatalf("%+v: short paragraph (%d tokens) split at %d", p, n, j)
			}
			if n > l && inside != (j%l == 0) {
				t.Fatalf("%+v: long paragraph (%d tokens) boundary at %d: %v, want %v", p, n, j, inside, j%l == 0)
			}
		}
		if n > l && (!starts[off] || (off+n < len(want) && !starts[off+n])) {
			t.Fatalf("%+v: long paragraph at %d not isolated from its neighbours", p, off)
		}
		off += n
	}
}

func TestAnchoredWindowsInvariants(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, p := range []Params{{512, 512}, {512, 384}, {10, 10}, {3, 3}, {64, 40}} {
		for trial := range 30 {
			doc := randomDoc(r, r.IntN(60))
			if trial%5 == 0 {
				doc = append(doc, nil, []int32{})
			}
			for _, target := range []int{1, 7, DefaultAnchorTarget(p), noCuts} {
				checkInvariants(t, p, doc, p.AnchoredWindowsTarget(doc, cls, sep, target))
			}
			checkInvariants(t, p, doc, p.AnchoredWindows(doc, cls, sep))
		}
	}
}

// changedWindows counts the windows of after that are not among the windows of before (by
// content), i.e. the windows an edit makes the GN embed again.
func changedWindows(before, after [][]int32) int {
	seen := map[uint64]bool{}
	for _, w := range before {
		seen[Key("fp", Default, w)] = true
	}
	n := 0
	for _, w := range after {
		if !seen[Key("fp", Default, w)] {
			n++
		}
	}
	return n
}

// TestAnchoredEditLocality is the point of anchored mode: one inserted, deleted or changed
// paragraph re-embeds a handful of windows, however long the document and wherever the edit
// is; fixed windows re-embed everything after an insertion or deletion.
func TestAnchoredEditLocality(t *testing.T) {
	p := Default
	r := rand.New(rand.NewPCG(42, 7))
	const trials = 300
	// The worst case is bounded by the segment between two cut points, which is long only with
	// exponentially small probability; this seed's worst is 5.
	const maxChanged = 8
	cases := []struct {
		name string
		edit func(doc [][]int32) [][]int32
	}{
		{"insert", func(doc [][]int32) [][]int32 {
			i := r.IntN(len(doc) + 1)
			return slices.Insert(slices.Clone(doc), i, randomPara(r, 5+r.IntN(200)))
		}},
		{"delete", func(doc [][]int32) [][]int32 {
			i := r.IntN(len(doc))
			return slices.Delete(slices.Clone(doc), i, i+1)
		}},
		{"change one token", func(doc [][]int32) [][]int32 {
			out := slices.Clone(doc)
			i := r.IntN(len(out))
			pa := slices.Clone(out[i])
			pa[r.IntN(len(pa))] ^= 1 << 14
			out[i] = pa
			return out
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var total, worst, fixedTotal, docWindows int
			for trial := range trials {
				// Document length varies 10x: the changed count must not grow with it.
				doc := randomDoc(r, 50+r.IntN(450))
				before := p.AnchoredWindows(doc, cls, sep)
				edited := c.edit(doc)
				after := p.AnchoredWindows(edited, cls, sep)
				checkInvariants(t, p, edited, after)
				n := changedWindows(before, after)
				if n > maxChanged {
					t.Fatalf("trial %d: %d of %d windows changed by one %s", trial, n, len(after), c.name)
				}
				total += n
				worst = max(worst, n)
				docWindows += len(after)
				fixedTotal += changedWindows(p.Windows(slices.Concat(doc...), cls, sep),
					p.Windows(slices.Concat(edited...), cls, sep))
			}
			mean := float64(total) / trials
			t.Logf("%s: anchored re-embeds %.2f windows per edit (worst %d, docs average %.0f windows); fixed re-embeds %.2f",
				c.name, mean, worst, float64(docWindows)/trials, float64(fixedTotal)/trials)
			if mean > 3 {
				t.Fatalf("mean changed windows %.2f > 3", mean)
			}
		})
	}
}

// TestCutPointsResynchronize shows why cut points exist. Greedy packing re-synchronises by
// luck, when some window's slack absorbs the shift; with paragraphs of equal length (numbered
// claims, table rows) there is no slack, and an early insertion shifts every later window.
// Anchored windows re-synchronise at the next cut point whatever the lengths.
func TestCutPointsResynchronize(t *testing.T) {
	p := Default
	r := rand.New(rand.NewPCG(3, 4))
	doc := make([][]int32, 3000)
	for i := range doc {
		doc[i] = randomPara(r, 30)
	}
	edited := slices.Insert(slices.Clone(doc), 1, randomPara(r, 30))
	cases := []struct {
		name    string
		target  int
		atLeast int // changed windows, bounds that hold with margin for this seed
		atMost  int
	}{
		{"greedy shifts every window", noCuts, 170, 1 << 30},
		{"anchored stays local", DefaultAnchorTarget(p), 1, 4},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := p.AnchoredWindowsTarget(doc, cls, sep, c.target)
			after := p.AnchoredWindowsTarget(edited, cls, sep, c.target)
			n := changedWindows(before, after)
			t.Logf("%d of %d windows changed", n, len(after))
			if n < c.atLeast || n > c.atMost {
				t.Fatalf("%d windows changed, want %d..%d", n, c.atLeast, c.atMost)
			}
		})
	}
}

// TestParagraphTokensConcatenate checks the assumption that lets anchored and fixed mode share
// one tokenization: WordPiece tokens never span a newline, so encoding paragraphs separately and
// concatenating equals encoding the whole text, literal special tokens included.
func TestParagraphTokensConcatenate(t *testing.T) {
	tok, err := wordpiece.Load(testenv.Tokenizer(t, "bge-small-en-v15"))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct{ name, text string }{
		{"plain", "A method of making a widget.\n\nThe widget comprises a frame."},
		{"literal specials", "claim 1 [SEP]\n[CLS] next [MASK] para\n[UNK]"},
		{"specials across newline", "[SE\nP] and [CL\nS]"},
		{"punctuation and hyphens at edges", "-foo\nbar-\n(baz)\n\"quoted\""},
		{"unicode and CJK", "naïve café\n日本語のテキスト\nΩ≈ç√∫\n\u00a0nbsp\u200bzero width"},
		{"CRLF and tabs", "first\r\nsecond\t\r\n\tthird"},
		{"long word", strings.Repeat("x", 300) + "\n" + strings.Repeat("ab", 80)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			whole := tok.Encode(c.text)
			var parts []int32
			for _, pa := range Paragraphs(c.text) {
				parts = append(parts, tok.Encode(pa)...)
			}
			if !slices.Equal(whole, parts) {
				t.Fatalf("whole text %v != concatenated paragraphs %v", whole, parts)
			}
		})
	}
}

// TestCutStopIsCut: cutting piece by piece (what a request that may be cancelled does) gives
// exactly the windows of one pass over the whole text, in both modes, and a stop error ends
// the cut early with that error.
func TestCutStopIsCut(t *testing.T) {
	tok, err := wordpiece.Load(testenv.Tokenizer(t, "bge-small-en-v15"))
	if err != nil {
		t.Fatal(err)
	}
	p := Params{K: 128, S: 128}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	para := "Tidal turbines convert the kinetic energy of moving sea water into electricity, naïve café 日本語. "
	texts := map[string]string{
		"many lines":          strings.Repeat(para+"\n", 3000),
		"one long line":       strings.Repeat(para, 3000),
		"no space at all":     strings.Repeat("x", 3*pieceBytes),
		"specials and CRLF":   strings.Repeat("claim 1 [SEP] next [MASK]\r\n\tthird ", 9000),
		"short":               "a bread oven",
		"space at piece edge": strings.Repeat("y", pieceBytes-1) + " " + strings.Repeat("z", pieceBytes+5),
	}
	for name, text := range texts {
		for _, anchored := range []bool{false, true} {
			want, wantN := p.Cut(tok, text, anchored)
			calls := 0
			got, gotN, err := p.CutStop(tok, text, anchored, func(int) error { calls++; return nil })
			if err != nil || gotN != wantN || !slices.EqualFunc(got, want, slices.Equal[[]int32]) {
				t.Fatalf("%s (anchored %v): %d tokens in %d windows piece by piece, %d in %d whole (err %v)", name, anchored, gotN, len(got), wantN, len(want), err)
			}
			if len(text) > 2*pieceBytes && strings.ContainsAny(text, " \n") && calls < 2 {
				t.Fatalf("%s: stop called %d times over %d bytes", name, calls, len(text))
			}
		}
	}
	stopped := errors.New("stopped")
	_, n, err := p.CutStop(tok, texts["one long line"], false, func(n int) error {
		if n > 1000 {
			return stopped
		}
		return nil
	})
	if !errors.Is(err, stopped) || n > 100000 {
		t.Fatalf("stop at 1000 tokens: %d tokens, err %v", n, err)
	}
}

// Command editbench measures what anchored windows buy and cost against the reference's fixed
// windows on the real patent corpus, from window keys alone (no GN is run): how many windows a
// first pass embeds, how full they are, and how many windows a re-ingest after small edits must
// embed again because their key is not in the cache yet.
//
//	go run ./ops/editbench -data ../shared/data/patents/uspto -seed 42 -frac 0.05
//
// A seeded fraction of documents gets one synthetic edit each, a third each of: insert a
// paragraph copied from another document, delete a paragraph, replace one word of a paragraph.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/connectors/uspto"
	"github.com/reignpipe/reignpipe/stages/chunk"
	"github.com/reignpipe/reignpipe/stages/wordpiece"
)

// fingerprint stands in for the GN fingerprint: keys are only compared within this run.
const fingerprint = "editbench"

// doc is one document as the chunker sees it: its paragraphs' texts and token ids.
type doc struct {
	id    string
	paras []string
	toks  [][]int32
}

// mode is one way of cutting a document into windows.
type mode struct {
	name    string
	p       chunk.Params
	windows func(d [][]int32, cls, sep int32) [][]int32
}

func main() {
	home, _ := os.UserHomeDir()
	data := flag.String("data", "../shared/data/patents/uspto", "folder searched recursively for .xml patent files")
	tokPath := flag.String("tokenizer", filepath.Join(home, ".cache", "reignpipe", "gn", "bge-small-en-v15", "tokenizer.json"), "WordPiece tokenizer.json")
	seed := flag.Uint64("seed", 42, "seed for choosing and editing documents")
	frac := flag.Float64("frac", 0.05, "fraction of documents edited, in (0, 1]")
	targets := flag.String("targets", "255,1020,2040", "extra anchored targets T to sweep (comma-separated, empty for none)")
	flag.Parse()
	if err := run(*data, *tokPath, *seed, *frac, *targets); err != nil {
		fmt.Fprintln(os.Stderr, "editbench:", err)
		os.Exit(1)
	}
}

func run(data, tokPath string, seed uint64, frac float64, targets string) error {
	if !(frac > 0 && frac <= 1) {
		return fmt.Errorf("-frac %v: need 0 < frac <= 1", frac)
	}
	tok, err := wordpiece.Load(tokPath)
	if err != nil {
		return err
	}
	docs, bad, err := readCorpus(data, tok)
	if err != nil {
		return err
	}
	if len(docs) == 0 {
		return fmt.Errorf("no patent documents under %s", data)
	}
	mismatch, err := checkConcat(data, tok)
	if err != nil {
		return err
	}
	edited, kinds := makeEdits(docs, tok, seed, frac)
	modes, err := buildModes(targets)
	if err != nil {
		return err
	}
	fmt.Printf("corpus %s: %d documents (%d bad inputs skipped), %d edited (%v), seed %d\n",
		data, len(docs), bad, len(edited), kinds, seed)
	fmt.Printf("paragraph-wise tokens != whole-text tokens in %d documents\n\n", mismatch)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\tdocs\tedited docs\ttotal windows\tmean content tok/window\twindows of edited docs\tre-embedded after edits\tre-embedded per edited doc\t")
	cls, sep := tok.CLS(), tok.SEP()
	for _, m := range modes {
		cache := map[uint64]bool{}
		windows, content := 0, 0
		for _, d := range docs {
			for _, w := range m.windows(d.toks, cls, sep) {
				cache[chunk.Key(fingerprint, m.p, w)] = true
				windows++
				content += len(w) - 2
			}
		}
		editedWindows, again := 0, 0
		for _, e := range edited {
			for _, w := range m.windows(e.toks, cls, sep) {
				editedWindows++
				if !cache[chunk.Key(fingerprint, m.p, w)] {
					again++
				}
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.1f\t%d\t%d\t%.2f\t\n", m.name, len(docs), len(edited), windows,
			float64(content)/float64(windows), editedWindows, again, float64(again)/float64(len(edited)))
	}
	return tw.Flush()
}

func buildModes(targets string) ([]mode, error) {
	fixed := func(p chunk.Params) mode {
		return mode{fmt.Sprintf("fixed K=%d S=%d", p.K, p.S), p, func(d [][]int32, cls, sep int32) [][]int32 {
			return p.Windows(slices.Concat(d...), cls, sep)
		}}
	}
	p := chunk.Default
	modes := []mode{
		fixed(p),
		fixed(chunk.Params{K: 512, S: 384}),
		{fmt.Sprintf("anchored K=%d (T=%d default)", p.K, chunk.DefaultAnchorTarget(p)), p, p.AnchoredWindows},
	}
	for f := range strings.SplitSeq(targets, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		t, err := strconv.Atoi(f)
		if err != nil || t < 1 {
			return nil, fmt.Errorf("-targets: %q is not a positive integer", f)
		}
		modes = append(modes, mode{fmt.Sprintf("anchored K=%d T=%d", p.K, t), p,
			func(d [][]int32, cls, sep int32) [][]int32 { return p.AnchoredWindowsTarget(d, cls, sep, t) }})
	}
	return modes, nil
}

// xmlFiles lists every .xml file under dir, in a stable order.
func xmlFiles(dir string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.EqualFold(filepath.Ext(path), ".xml") {
			files = append(files, path)
		}
		return nil
	})
	slices.Sort(files)
	return files, err
}

// eachDocument calls fn with every patent of every file; bad documents are counted, not fatal,
// as in the pipeline (which dead-letters them).
func eachDocument(dir string, fn func(id, text string)) (bad int, err error) {
	files, err := xmlFiles(dir)
	if err != nil {
		return 0, err
	}
	ctx := context.Background()
	for _, f := range files {
		r, err := uspto.Open(uspto.Options{Path: f})
		if err != nil {
			return bad, err
		}
		for {
			d, _, err := r.Read(ctx)
			if err == io.EOF {
				break
			}
			var badInput *connectors.BadInputError
			if errors.As(err, &badInput) {
				bad++
				continue
			}
			if err != nil {
				r.Close(ctx)
				return bad, err
			}
			fn(d.ID, d.Text)
		}
		if err := r.Close(ctx); err != nil {
			return bad, err
		}
	}
	return bad, nil
}

func readCorpus(dir string, tok *wordpiece.Tokenizer) ([]doc, int, error) {
	var docs []doc
	bad, err := eachDocument(dir, func(id, text string) {
		d := doc{id: id, paras: chunk.Paragraphs(text)}
		if len(d.paras) == 0 {
			// Nothing to window or edit (whitespace-only text); the edit picker needs paragraphs.
			return
		}
		for _, p := range d.paras {
			d.toks = append(d.toks, tok.Encode(p))
		}
		docs = append(docs, d)
	})
	return docs, bad, err
}

// checkConcat counts documents where encoding the whole text differs from concatenating the
// paragraphs' encodings, the assumption that lets fixed windows be built from paragraph tokens.
func checkConcat(dir string, tok *wordpiece.Tokenizer) (int, error) {
	n := 0
	_, err := eachDocument(dir, func(_, text string) {
		var parts []int32
		for _, p := range chunk.Paragraphs(text) {
			parts = tok.AppendEncode(parts, p)
		}
		if !slices.Equal(parts, tok.Encode(text)) {
			n++
		}
	})
	return n, err
}

// makeEdits picks ceil(frac*len(docs)) documents with the seed and edits each once, cycling
// through insert, delete and change so each kind gets a third.
func makeEdits(docs []doc, tok *wordpiece.Tokenizer, seed uint64, frac float64) ([]doc, map[string]int) {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	n := min(len(docs), int(math.Ceil(frac*float64(len(docs)))))
	order := r.Perm(len(docs))[:n]
	kinds := map[string]int{}
	var out []doc
	for i, di := range order {
		d := docs[di]
		paras := slices.Clone(d.paras)
		kind := [...]string{"insert", "delete", "change"}[i%3]
		if kind == "delete" && len(paras) < 2 {
			// Deleting the only paragraph would leave an empty document, not an edit.
			kind = "change"
		}
		switch kind {
		case "insert":
			src := docs[r.IntN(len(docs))]
			paras = slices.Insert(paras, r.IntN(len(paras)+1), src.paras[r.IntN(len(src.paras))])
		case "delete":
			j := r.IntN(len(paras))
			paras = slices.Delete(paras, j, j+1)
		case "change":
			j := r.IntN(len(paras))
			paras[j] = replaceWord(r, paras[j], docs)
		}
		kinds[kind]++
		e := doc{id: d.id, paras: paras}
		for _, p := range paras {
			e.toks = append(e.toks, tok.Encode(p))
		}
		out = append(out, e)
	}
	return out, kinds
}

// replaceWord swaps one whitespace-separated word of s for a word of a random other paragraph
// (a different word where one can be found, so the edit is real).
func replaceWord(r *rand.Rand, s string, docs []doc) string {
	words := strings.Fields(s)
	if len(words) == 0 {
		return s + " edited"
	}
	i := r.IntN(len(words))
	for range 20 {
		src := docs[r.IntN(len(docs))]
		w := strings.Fields(src.paras[r.IntN(len(src.paras))])
		if len(w) == 0 {
			continue
		}
		if cand := w[r.IntN(len(w))]; !strings.EqualFold(cand, words[i]) {
			words[i] = cand
			return strings.Join(words, " ")
		}
	}
	words[i] += "x"
	return strings.Join(words, " ")
}

// Command prep writes the peer benchmark's corpus once, so that every system embeds exactly the
// text reignpipe embeds: the first -docs long articles that reignpipe's own wikipedia source
// yields, as corpus.jsonl ({"id", "title", "text"}), and windows.json with the K=S=512 windows
// of reignpipe's WordPiece ids for each document, which the peers' windows must equal.
//
//	go run ./ops/bench/peers/prep -dump DUMP.xml.bz2 -out DIR [-docs 20] [-min-windows 2]
//
// The JSONL is read back through reignpipe's jsonl source (what the benchmarked `reignpipe run`
// reads) and refused if any text differs from the wikipedia source's, so the windows written are
// those of the run; the doc IDs in windows.json are the jsonl source's, as in the chunk cache.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/connectors/jsonl"
	"github.com/reignpipe/reignpipe/connectors/wikipedia"
	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/schemas"
	"github.com/reignpipe/reignpipe/stages/chunk"
	"github.com/reignpipe/reignpipe/stages/wordpiece"
)

type docWindows struct {
	ID      string    `json:"id"`
	Title   string    `json:"title"`
	Tokens  int       `json:"tokens"`
	Windows [][]int32 `json:"windows"`
}

type output struct {
	GN      string       `json:"gn"`
	K       int          `json:"k"`
	S       int          `json:"s"`
	Tokens  int          `json:"tokens"`
	Windows int          `json:"windows"`
	Docs    []docWindows `json:"docs"`
}

func main() {
	dump := flag.String("dump", "", "Wikipedia pages-articles dump (.xml.bz2)")
	out := flag.String("out", "", "output folder (corpus.jsonl, windows.json)")
	docs := flag.Int("docs", 20, "articles to keep")
	minWindows := flag.Int("min-windows", 2, "keep only articles with at least this many K=S=512 windows (long articles)")
	gnName := flag.String("gn", "all-minilm-l6-v2", "fetched GN whose tokenizer.json cuts the windows")
	flag.Parse()
	if err := run(*dump, *out, *gnName, *docs, *minWindows); err != nil {
		fmt.Fprintln(os.Stderr, "prep:", err)
		os.Exit(1)
	}
}

// readAll reads the documents of src while keep says so, skipping bad inputs as the runner
// would dead-letter them.
func readAll(src connectors.Source, keep func(schemas.Document) bool) ([]schemas.Document, error) {
	var docs []schemas.Document
	_, err := connectors.Each(context.Background(), src, func(d schemas.Document) (bool, error) {
		if !keep(d) {
			return false, nil
		}
		docs = append(docs, d)
		return true, nil
	})
	return docs, err
}

func run(dump, outDir, gnName string, maxDocs, minWindows int) error {
	if dump == "" || outDir == "" {
		return errors.New("-dump and -out are required")
	}
	_, tokPath := pipelines.GNConfig{Name: gnName}.ModelPaths()
	tok, err := wordpiece.Load(tokPath)
	if err != nil {
		return err
	}
	p := chunk.Default
	windows := func(text string) [][]int32 { return p.Windows(tok.Encode(text), tok.CLS(), tok.SEP()) }

	src, err := wikipedia.Open(wikipedia.Options{Path: dump})
	if err != nil {
		return err
	}
	var picked []schemas.Document
	_, err = readAll(src, func(d schemas.Document) bool {
		if len(picked) >= maxDocs {
			return false
		}
		if len(windows(d.Text)) >= minWindows {
			picked = append(picked, d)
		}
		return true
	})
	src.Close(context.Background())
	if err != nil {
		return err
	}
	if len(picked) < maxDocs {
		return fmt.Errorf("%s has only %d articles with >= %d windows, want %d", dump, len(picked), minWindows, maxDocs)
	}

	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return err
	}
	corpus := filepath.Join(outDir, "corpus.jsonl")
	f, err := os.Create(corpus)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for _, d := range picked {
		if err := enc.Encode(map[string]string{"id": d.ID, "title": d.Title, "text": d.Text}); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}

	// Read back the way `reignpipe run` with a jsonl source will.
	back, err := jsonl.Open(jsonl.Options{Path: corpus})
	if err != nil {
		return err
	}
	again, err := readAll(back, func(schemas.Document) bool { return true })
	back.Close(context.Background())
	if err != nil {
		return err
	}
	if len(again) != len(picked) {
		return fmt.Errorf("jsonl source read %d documents back, wrote %d", len(again), len(picked))
	}
	res := output{GN: gnName, K: p.K, S: p.S}
	for i, d := range again {
		if d.Text != picked[i].Text {
			return fmt.Errorf("document %s: the jsonl source's text differs from the wikipedia source's", picked[i].ID)
		}
		ids := tok.Encode(d.Text)
		w := p.Windows(ids, tok.CLS(), tok.SEP())
		res.Docs = append(res.Docs, docWindows{ID: d.ID, Title: d.Title, Tokens: len(ids), Windows: w})
		res.Tokens += len(ids)
		res.Windows += len(w)
	}
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(outDir, "windows.json"), b, 0o644); err != nil {
		return err
	}
	fmt.Printf("prep: %d articles, %d tokens, %d windows -> %s\n", len(res.Docs), res.Tokens, res.Windows, outDir)
	return nil
}

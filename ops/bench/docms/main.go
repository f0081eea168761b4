// Command docms writes the corpus for the cache-build cost per document (the REIGN paper's
// Table 11, in this project's terms): -docs documents of about -tokens WordPiece tokens each
// (GoodWiki's mean is about 5.8k), cut from the longest articles of a Wikipedia dump at
// paragraph ends (tokens never span a newline, so the count is exact), as JSONL for
// pipelines/jsonl.yaml. ops/bench/docms.sh runs reignpipe on it with each GN.
//
//	go run ./ops/bench/docms -dump enwiki.xml.bz2 -out corpus.jsonl [-docs 8] [-tokens 5800]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/connectors/wikipedia"
	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/schemas"
	"github.com/reignpipe/reignpipe/stages/chunk"
	"github.com/reignpipe/reignpipe/stages/wordpiece"
)

func main() {
	dump := flag.String("dump", "", "Wikipedia dump (.xml.bz2)")
	out := flag.String("out", "", "JSONL to write")
	docs := flag.Int("docs", 8, "documents")
	tokens := flag.Int("tokens", 5800, "WordPiece tokens per document (at least; cut at the paragraph end that reaches it)")
	gnName := flag.String("gn", "bge-small-en-v15", "GN whose tokenizer counts the tokens")
	flag.Parse()
	if err := run(*dump, *out, *docs, *tokens, *gnName); err != nil {
		fmt.Fprintln(os.Stderr, "docms:", err)
		os.Exit(1)
	}
}

func run(dump, out string, docs, tokens int, gnName string) error {
	if dump == "" || out == "" || docs < 1 || tokens < 1 {
		return errors.New("need -dump, -out, -docs >= 1 and -tokens >= 1")
	}
	_, tp := pipelines.GNConfig{Name: gnName}.ModelPaths()
	tok, err := wordpiece.Load(tp)
	if err != nil {
		return err
	}
	src, err := wikipedia.Open(wikipedia.Options{Path: dump})
	if err != nil {
		return err
	}
	defer src.Close(context.Background())
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	n, total := 0, 0
	_, err = connectors.Each(context.Background(), src, func(d schemas.Document) (bool, error) {
		var keep []string
		count := 0
		for _, p := range chunk.Paragraphs(d.Text) {
			if count >= tokens {
				break
			}
			keep = append(keep, p)
			count += len(tok.Encode(p))
		}
		if count < tokens {
			return true, nil // shorter than the target: not a GoodWiki-length document
		}
		text := strings.Join(keep, "\n")
		if got := len(tok.Encode(text)); got != count {
			return false, fmt.Errorf("%s: %d tokens by paragraph, %d whole", d.Title, count, got)
		}
		if err := enc.Encode(map[string]string{"id": d.ID, "title": d.Title, "text": text}); err != nil {
			return false, err
		}
		n++
		total += count
		return n < docs, nil
	})
	if err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if n < docs {
		return fmt.Errorf("%s has only %d articles of %d tokens or more", dump, n, tokens)
	}
	fmt.Printf("%d documents, %d tokens (mean %.0f) -> %s\n", n, total, float64(total)/float64(n), out)
	return nil
}

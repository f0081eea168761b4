package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/components"
	"github.com/reignpipe/reignpipe/pipelines/serving/query"
	"github.com/reignpipe/reignpipe/pipelines/serving/search"
)

// cmdSearch turns one query document into the pipeline's vector and prints the nearest
// documents of the pipeline's vector store (pipelines/serving/search).
func cmdSearch(ctx context.Context, args []string) error {
	return searchTo(ctx, os.Stdout, os.Stdin, args)
}

func searchTo(ctx context.Context, w io.Writer, stdin io.Reader, args []string) error {
	fs := newFlagSet("search", args)
	docPath := fs.String("doc", "", "query document: a patent XML file, a one-line JSONL file or a plain text file")
	docFormat := fs.String("doc-format", "", "read --doc as uspto, jsonl or text (default: by the file name)")
	text := fs.String("text", "", "query text; - reads it from standard input")
	id := fs.String("id", "", "a stored document's id: its published vector is the query")
	k := fs.Int("k", 10, "number of documents to return")
	exact := fs.Bool("exact", false, "pgvector: scan the table instead of its HNSW index (exact top k)")
	gnSpace := fs.Bool("gn", false, "search the GN mean-pool vectors published beside REIGN vectors")
	sink := fs.Int("sink", -1, "search the pipeline's sinks[N] (default: the first pgvector sink, else the first parquet or jsonl sink)")
	noCache := fs.Bool("no-cache", false, "read no chunk cache: every query window goes to the GN")
	format := fs.String("format", "text", "text or json")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	given := 0
	for _, s := range []string{*docPath, *text, *id} {
		if s != "" {
			given++
		}
	}
	switch {
	case len(pos) != 1:
		return usageError("search", "give exactly one pipeline file")
	case given != 1:
		return usageError("search", "give one query: --doc FILE, --text TEXT (- for standard input) or --id DOC_ID")
	case *k < 1:
		return usageError("search", "--k must be >= 1")
	case *format != "text" && *format != "json":
		return usageError("search", fmt.Sprintf("--format %q is not text or json", *format))
	}
	cfg, err := pipelines.Load(pos[0])
	if err != nil {
		return err
	}
	req := search.Request{ID: *id, K: *k, Exact: *exact, GN: *gnSpace}
	switch {
	case *docPath != "":
		d, err := search.ReadDocument(*docPath, search.DocOptions{Sections: components.Sections(cfg.Source), MaxBytes: cfg.Source.MaxDocBytes, Format: *docFormat})
		if err != nil {
			return err
		}
		req.Doc = &d
	case *text == "-":
		d, err := search.TextDocument(stdin, "query:stdin", "", cfg.Source.MaxDocBytes)
		if err != nil {
			return err
		}
		req.Doc = &d
	case *text != "":
		d, err := search.TextDocument(strings.NewReader(*text), "query:text", "", cfg.Source.MaxDocBytes)
		if err != nil {
			return err
		}
		req.Doc = &d
	}
	s, err := search.Open(ctx, cfg, search.Options{Sink: *sink, Query: query.Options{NoCache: *noCache}})
	if err != nil {
		return err
	}
	res, err := s.Search(ctx, req)
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if *format == "json" {
		b, _ := json.MarshalIndent(res, "", "  ")
		_, err = fmt.Fprintln(w, string(b))
		return err
	}
	printSearch(w, res, s.Embedder.CacheNote)
	return nil
}

func printSearch(w io.Writer, r *search.Result, cacheNote string) {
	q := r.Query
	how := fmt.Sprintf("%d windows: %d from the chunk cache, %d embedded by the GN", q.Windows, q.CacheHits, q.GNWindows)
	if q.Stored {
		how = "its stored vector"
	}
	title := ""
	if q.Title != "" {
		title = fmt.Sprintf(" %q", q.Title)
	}
	fmt.Fprintf(w, "query %s%s (%d chunks, %d tokens; %s)\n", q.DocID, title, q.NChunks, q.NTokens, how)
	if cacheNote != "" && !q.Stored {
		fmt.Fprintf(w, "chunk cache %s\n", cacheNote)
	}
	fmt.Fprintf(w, "top %d in space %s from %s by %s:\n", r.K, q.Space, r.Store, r.How)
	for i, h := range r.Hits {
		fmt.Fprintf(w, "  %2d. %.4f  %-24s %s\n", i+1, h.Score, h.DocID, h.Title)
	}
	if len(r.Hits) == 0 {
		fmt.Fprintln(w, "  (no documents)")
	}
	if r.OtherSpace > 0 {
		fmt.Fprintf(w, "%d documents' newest vectors are in another space and were not compared (written before the aggregation changed?)\n", r.OtherSpace)
	}
}

package eval

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/connectors/memsource"
	"github.com/reignpipe/reignpipe/connectors/vectorfile"
	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/engine"
	"github.com/reignpipe/reignpipe/pipelines/quality/beir"
)

// Encoder runs the pipeline cfg over src in this process (the embedded runner, from scratch,
// reading src instead of the configured source). The command line supplies it, so this
// package scores what `reignpipe run` computes without owning the runner's wiring.
type Encoder func(ctx context.Context, cfg *pipelines.Config, src connectors.Source) (engine.Summary, error)

// EncodeCounts are the window counts of EncodeSides, both sides together.
type EncodeCounts struct {
	Windows   int64 `json:"windows"`
	GNWindows int64 `json:"gn_windows"`        // cache misses, embedded by the GN
	GNShared  int64 `json:"gn_windows_shared"` // cache misses that took an identical in-flight window's vector
	CacheHits int64 `json:"cache_hits"`        // served from the chunk cache: GN work avoided
}

// Doc ids of the two sides in the cache index: "c:<id>" for the corpus, "q:<id>" for queries.
const (
	CorpusSource = "c"
	QuerySource  = "q"
)

// EncodeSides runs the dataset's corpus (source "c") and queries (source "q") through the
// pipeline as a mean-pool run, leaving every window in the chunk cache and every document's
// manifest (doc id "c:<id>" or "q:<id>") in the cache index. The documents are read from memory
// (connectors/memsource); vectors and state go under outDir.
func EncodeSides(ctx context.Context, encode Encoder, cfg *pipelines.Config, ds *beir.Dataset, outDir string) (EncodeCounts, error) {
	var n EncodeCounts
	if encode == nil {
		return n, errors.New("eval: no encoder to run the pipeline with")
	}
	sides := []struct {
		name, what string
		len        int
		at         func(int) memsource.Doc
	}{
		{CorpusSource, "corpus", len(ds.Corpus), func(i int) memsource.Doc {
			return memsource.Doc{ID: ds.Corpus[i].ID, Title: ds.Corpus[i].Title, Text: ds.Corpus[i].Text}
		}},
		{QuerySource, "queries", len(ds.Queries), func(i int) memsource.Doc { return memsource.Doc{ID: ds.Queries[i].ID, Text: ds.Queries[i].Text} }},
	}
	for _, side := range sides {
		c := *cfg
		c.Name = "eval-" + side.name
		c.Source = pipelines.SourceConfig{Type: "memory", Path: side.what, Name: side.name}
		c.Aggregate = pipelines.AggregateConfig{Type: "meanpool"}
		c.Sinks = []pipelines.SinkConfig{{Type: "parquet", Settings: &vectorfile.Config{Dir: filepath.Join(outDir, "vectors-"+side.name)}}}
		c.DeadLetter.Path = filepath.Join(outDir, "deadletter.jsonl")
		c.Run.StateDir, c.Run.Summary, c.Run.Progress = filepath.Join(outDir, "state"), "", "log"
		// Every document is encoded, blank ones too: a corpus is scored whole, and the
		// reference embeds an empty text as the one window [CLS][SEP] (ops/COMMANDS.md, "Empty
		// documents"). A skipped document would have no manifest to rank.
		src, err := memsource.New(memsource.Options{Source: side.name, Len: side.len, At: side.at, KeepEmpty: true})
		if err != nil {
			return n, err
		}
		rs, err := encode(ctx, &c, src)
		if err != nil {
			return n, fmt.Errorf("encoding the %s: %w", side.what, err)
		}
		if rs.DocsFailed > 0 {
			return n, fmt.Errorf("encoding the %s: %d documents failed (see %s)", side.what, rs.DocsFailed, c.DeadLetter.Path)
		}
		n.Windows += rs.Windows
		n.GNWindows += rs.GNWindows
		n.GNShared += rs.GNShared
		n.CacheHits += rs.CacheHits
	}
	return n, nil
}

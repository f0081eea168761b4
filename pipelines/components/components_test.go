package components

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/connectors/pgvector"
	"github.com/reignpipe/reignpipe/connectors/uspto"
	"github.com/reignpipe/reignpipe/connectors/watchdir"
	"github.com/reignpipe/reignpipe/connectors/wikipedia"
	"github.com/reignpipe/reignpipe/connectors/wikipedia/pageset"
	"github.com/reignpipe/reignpipe/pipelines/registry"
)

func TestBuiltinIsValid(t *testing.T) {
	if err := Builtin().Validate(); err != nil {
		t.Fatal(err)
	}
}

// openSource opens a built-in source type.
func openSource(t *testing.T, typ string, c registry.SourceConfig) connectors.Source {
	t.Helper()
	s, ok := Builtin().Source(typ)
	if !ok {
		t.Fatalf("no source %q", typ)
	}
	src, err := s.Open(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// source.max_doc_bytes reaches the patent splitter: a record past twice the bound is a bad
// input naming the bound, and the next record is still read.
func TestUSPTORecordBoundFollowsMaxDocBytes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ipg.xml")
	big := "<?xml version=\"1.0\"?>\n<us-patent-grant>" + strings.Repeat("x", 5000) + "</us-patent-grant>\n"
	small := "<?xml version=\"1.0\"?>\n<us-patent-grant></us-patent-grant>\n"
	if err := os.WriteFile(path, []byte(big+small), 0o644); err != nil {
		t.Fatal(err)
	}
	src := openSource(t, "uspto", registry.SourceConfig{Path: path, MaxDocBytes: 1000})
	defer src.Close(context.Background())
	_, _, err := src.Read(context.Background())
	var bad *connectors.BadInputError
	if !errors.As(err, &bad) || !strings.Contains(err.Error(), "2000-byte limit") {
		t.Fatalf("first record: %v, want a bad input over the 2000-byte limit", err)
	}
	if _, _, err := src.Read(context.Background()); errors.As(err, &bad) && strings.Contains(err.Error(), "limit") {
		t.Fatalf("second record refused too: %v", err)
	}
}

// The same bound reaches the Wikipedia reader: a page past twice source.max_doc_bytes is a bad
// input naming the page.
func TestWikipediaPageBoundFollowsMaxDocBytes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "testwiki-pages.xml")
	page := func(id int, text string) string {
		return fmt.Sprintf("<page><title>T%d</title><ns>0</ns><id>%d</id><revision><id>%d</id><text>%s</text></revision></page>\n", id, id, id+100, text)
	}
	dump := "<mediawiki><siteinfo><dbname>testwiki</dbname></siteinfo>\n" + page(1, strings.Repeat("word ", 1000)) + page(2, "short text") + "</mediawiki>\n"
	if err := os.WriteFile(path, []byte(dump), 0o644); err != nil {
		t.Fatal(err)
	}
	src := openSource(t, "wikipedia", registry.SourceConfig{Path: path, MaxDocBytes: 1000})
	defer src.Close(context.Background())
	_, ack, err := src.Read(context.Background())
	var bad *connectors.BadInputError
	if !errors.As(err, &bad) || bad.DocID != "testwiki:1" || !strings.Contains(err.Error(), "over the bound of 2000") {
		t.Fatalf("first page: %v, want a bad input over the bound of 2000", err)
	}
	_ = ack(context.Background(), err)
	if d, _, err := src.Read(context.Background()); err != nil || d.ID != "testwiki:2" {
		t.Fatalf("second page: %v %v", d.ID, err)
	}
}

// source.delete_missing keeps the article set under the run's state prefix, and without a state
// folder to keep it in the source does not open.
func TestWikipediaDeleteMissingState(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "testwiki-pages.xml")
	dump := "<mediawiki><siteinfo><dbname>testwiki</dbname></siteinfo>\n" +
		"<page><title>T</title><ns>0</ns><id>7</id><revision><id>70</id><text>some words</text></revision></page>\n</mediawiki>\n"
	if err := os.WriteFile(path, []byte(dump), 0o644); err != nil {
		t.Fatal(err)
	}
	on := &wikipedia.Config{DeleteMissing: true}
	typ, _ := Builtin().Source("wikipedia")
	if _, err := typ.Open(context.Background(), registry.SourceConfig{Path: path, Settings: on}); err == nil || !strings.HasPrefix(err.Error(), "source.delete_missing: needs the run's state folder (run.state_dir)") {
		t.Fatalf("without a state folder: %v", err)
	}
	src := openSource(t, "wikipedia", registry.SourceConfig{Path: path, Settings: on, StateBase: filepath.Join(dir, "state", "wiki")})
	for {
		_, _, err := src.Read(context.Background())
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	src.Close(context.Background())
	set, err := pageset.Open(filepath.Join(dir, "state", "wiki.wikipedia-articles"))
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	if p, ok, err := set.Next(); set.Label() != "testwiki" || !ok || err != nil || p != (pageset.Page{ID: 7, Rev: 70}) {
		t.Fatalf("kept set %q: %v %v %v", set.Label(), p, ok, err)
	}
}

// WithCheckpoint makes any aggregation a reign one of the given checkpoint: a reign section
// keeps its other keys (and the caller's section is not changed), another takes reign's defaults.
func TestWithCheckpoint(t *testing.T) {
	mine := &ReignConfig{Checkpoint: "old", TrainedOn: "bge-small-en-v15", SingleChunk: "gn"}
	cases := []struct {
		name string
		in   registry.AggregateConfig
		want ReignConfig
	}{
		{"from meanpool", registry.AggregateConfig{Type: "meanpool"}, ReignConfig{Checkpoint: "new", SingleChunk: "reign"}},
		{"from reign", registry.AggregateConfig{Type: "reign", Settings: mine}, ReignConfig{Checkpoint: "new", TrainedOn: "bge-small-en-v15", SingleChunk: "gn"}},
		{"from a section built in code", registry.AggregateConfig{}, ReignConfig{Checkpoint: "new", SingleChunk: "reign"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := WithCheckpoint(c.in, "new")
			if got.Type != "reign" || *got.Settings.(*ReignConfig) != c.want {
				t.Fatalf("%+v %+v, want %+v", got, got.Settings, c.want)
			}
		})
	}
	if mine.Checkpoint != "old" {
		t.Fatal("the caller's section changed")
	}
}

// The typed accessors give a section's settings, or the type's defaults for one built in code.
func TestSettingsAccessors(t *testing.T) {
	if got := Sections(registry.SourceConfig{Type: "uspto", Settings: &USPTOConfig{Text: uspto.Config{Sections: []string{"claims"}}}}); len(got) != 1 || got[0] != "claims" {
		t.Fatalf("uspto sections %v", got)
	}
	if got := Sections(registry.SourceConfig{Type: "jsonl", Settings: &watchdir.Config{}}); got != nil {
		t.Fatalf("jsonl sections %v", got)
	}
	if p := PgvectorSettings(registry.SinkConfig{Type: "pgvector"}); *p != pgvector.DefaultConfig() {
		t.Fatalf("pgvector defaults %+v", p)
	}
	s, _ := Builtin().Sink("pgvector")
	if got := s.Output(registry.SinkConfig{Type: "pgvector", Settings: &pgvector.Config{DSN: "postgres://u:secret@db:5432/v", Table: "docs"}}); got != "pgvector:db:5432/v table docs" {
		t.Fatalf("output %q", got)
	}
}

package registry_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/connectors/memsource"
	"github.com/reignpipe/reignpipe/pipelines/registry"
)

// greeting is the settings of the greeting source: its keys, with their defaults and docs in
// the tags and their rules in Validate.
type greeting struct {
	Salute string `yaml:"salute" default:"hello" doc:"the word before each name"`
}

func (g greeting) Validate(bad registry.Bad) error {
	if strings.TrimSpace(g.Salute) == "" {
		return bad("salute", "must say something, e.g. salute: hi")
	}
	return nil
}

// A component declares its type, settings and constructor in one place; the loader checks a
// section against the registry, and the runner opens the component through it.
func ExampleRegistry() {
	config := func() any { return &greeting{Salute: "hello"} }
	reg := &registry.Registry{Sources: []registry.Source{{
		Type:   "greeting",
		Doc:    "one document per name in path (a comma-separated list)",
		Config: config,
		Open: func(_ context.Context, c registry.SourceConfig) (connectors.Source, error) {
			g := c.Settings.(*greeting)
			return memsource.New(memsource.Options{Source: "greeting", Len: 1,
				At: func(int) memsource.Doc { return memsource.Doc{ID: "1", Text: g.Salute + " " + c.Path} }})
		},
	}}}
	if err := reg.Validate(); err != nil {
		fmt.Println(err)
		return
	}
	src, _ := reg.Source("greeting")
	for _, k := range src.Keys() {
		fmt.Printf("source.%s (default %s): %s\n", k.Name, k.Default, k.Doc)
	}
	bad := func(key, format string, args ...any) error {
		return fmt.Errorf("source."+key+": "+format, args...)
	}
	fmt.Println(reg.CheckSource(registry.SourceConfig{Type: "rss"}, bad))
	fmt.Println(reg.CheckSource(registry.SourceConfig{Type: "greeting", Settings: &greeting{Salute: " "}}, bad))

	s, err := src.Open(context.Background(), registry.SourceConfig{Type: "greeting", Path: "world", Settings: &greeting{Salute: "hi"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close(context.Background())
	doc, ack, err := s.Read(context.Background())
	fmt.Println(doc.ID, doc.Text, err)
	fmt.Println(ack(context.Background(), nil))
	// Output:
	// source.salute (default hello): the word before each name
	// source.type: unknown source "rss" (greeting)
	// source.salute: must say something, e.g. salute: hi
	// greeting:1 hi world <nil>
	// <nil>
}

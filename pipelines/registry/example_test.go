package registry_test

import (
	"context"
	"fmt"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/connectors/memsource"
	"github.com/reignpipe/reignpipe/pipelines/registry"
)

// A component declares its type, keys, validation and constructor in one place; the loader
// checks a section against the registry, and the runner opens the component through it.
func ExampleRegistry() {
	reg := &registry.Registry{Sources: []registry.Source{{
		Type: "greeting",
		Doc:  "one document per name in path (a comma-separated list)",
		Validate: func(c registry.SourceConfig, bad registry.Bad) error {
			if c.Path == "" {
				return bad("path", "names the greeted, e.g. path: world")
			}
			return nil
		},
		Open: func(c registry.SourceConfig) (connectors.Source, error) {
			return memsource.New(memsource.Options{Source: "greeting", Len: 1,
				At: func(int) memsource.Doc { return memsource.Doc{ID: "1", Text: "hello " + c.Path} }})
		},
	}}}
	if err := reg.Validate(); err != nil {
		fmt.Println(err)
		return
	}
	bad := func(key, format string, args ...any) error {
		return fmt.Errorf("source."+key+": "+format, args...)
	}
	fmt.Println(reg.CheckSource(registry.SourceConfig{Type: "rss"}, registry.SourceConfig{}, bad))
	fmt.Println(reg.CheckSource(registry.SourceConfig{Type: "greeting"}, registry.SourceConfig{}, bad))

	src, _ := reg.Source("greeting")
	s, err := src.Open(registry.SourceConfig{Type: "greeting", Path: "world"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close(context.Background())
	doc, ack, err := s.Read(context.Background())
	fmt.Println(doc.ID, doc.Text, err)
	fmt.Println(ack(context.Background(), nil))
	// Output:
	// source.type: unknown source "rss" (greeting)
	// source.path: names the greeted, e.g. path: world
	// greeting:1 hello world <nil>
	// <nil>
}

package registry

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/reignpipe/reignpipe/connectors"
)

// watchSettings and sectionSettings are settings as components declare them.
type watchSettings struct {
	Watch   bool          `yaml:"watch" default:"false" doc:"watch the folder"`
	Pattern string        `yaml:"pattern" default:"*" doc:"name glob"`
	Poll    time.Duration `yaml:"poll" default:"10s" doc:"listing interval"`
}

func (w watchSettings) Validate(bad Bad) error {
	if w.Pattern != "" && !w.Watch {
		return bad("pattern", "applies only with watch: true")
	}
	return nil
}

type sectionSettings struct {
	Sections []string      `yaml:"sections" default:"all" doc:"parts of the text"`
	Files    watchSettings `yaml:",inline"`
}

func (s sectionSettings) Validate(bad Bad) error { return s.Files.Validate(bad) }

// unvalidated inlines settings with rules but has none itself: its parts would go unchecked.
type unvalidated struct {
	Files watchSettings `yaml:",inline"`
}

func testRegistry() *Registry {
	open := func(context.Context, SourceConfig) (connectors.Source, error) { return nil, nil }
	return &Registry{Sources: []Source{
		{Type: "a", Config: func() any { return &sectionSettings{} }, Open: open},
		{Type: "b", Config: func() any { return &watchSettings{Poll: 10 * time.Second} }, Open: open},
		{Type: "c", Open: open},
	}}
}

func bad(key, format string, args ...any) error {
	return fmt.Errorf("source.%s: %s", key, fmt.Sprintf(format, args...))
}

// CheckSource refuses an unknown type and runs the type's own validation on its settings (its
// defaults when the section carries none).
func TestCheckSource(t *testing.T) {
	r := testRegistry()
	cases := []struct {
		c    SourceConfig
		want string // "" = accepted
	}{
		{SourceConfig{Type: "a", Settings: &sectionSettings{Sections: []string{"x"}, Files: watchSettings{Watch: true, Pattern: "*.xml"}}}, ""},
		{SourceConfig{Type: "z"}, `source.type: unknown source "z" (a, b, c)`},
		{SourceConfig{Type: "b", Settings: &watchSettings{Pattern: "*.xml"}}, "source.pattern: applies only with watch: true"},
		{SourceConfig{Type: "a", Settings: &sectionSettings{Files: watchSettings{Pattern: "*.xml"}}}, "source.pattern: applies only with watch: true"},
		{SourceConfig{Type: "b"}, ""}, // the defaults
		{SourceConfig{Type: "c"}, ""}, // no keys of its own
		{SourceConfig{Type: "b", Settings: &sectionSettings{}}, "settings of another type"},
		{SourceConfig{Type: "c", Settings: &watchSettings{}}, "settings of another type"},
	}
	for _, tc := range cases {
		err := r.CheckSource(tc.c, bad)
		if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.c, err, tc.want)
		}
	}
}

// A type's keys are its settings' fields, inline ones in their place, with their tags.
func TestKeys(t *testing.T) {
	r := testRegistry()
	a, _ := r.Source("a")
	var got []string
	for _, k := range a.Keys() {
		got = append(got, k.Name+"="+k.Default+":"+k.Doc)
	}
	want := "sections=all:parts of the text watch=false:watch the folder pattern=*:name glob poll=10s:listing interval"
	if strings.Join(got, " ") != want {
		t.Fatalf("keys %q\nwant %q", strings.Join(got, " "), want)
	}
	if c, _ := r.Source("c"); c.Keys() != nil {
		t.Fatalf("a type without settings has keys %v", c.Keys())
	}
	var common []string
	for _, k := range r.SourceKeys() {
		common = append(common, k.Name)
	}
	if strings.Join(common, " ") != "path name max_doc_bytes" {
		t.Fatalf("common source keys %v", common)
	}
}

type undocumented struct {
	Depth int `yaml:"depth" default:"1"`
}

type shadowing struct {
	Path string `yaml:"path" default:"—" doc:"a second path"`
}

type wrongDefault struct {
	Depth int `yaml:"depth" default:"3" doc:"how deep"`
}

type twice struct {
	Files watchSettings `yaml:",inline"`
	Watch bool          `yaml:"watch" default:"false" doc:"again"`
}

func (t twice) Validate(bad Bad) error { return t.Files.Validate(bad) }

func TestValidateRefuses(t *testing.T) {
	r := testRegistry()
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	open := func(context.Context, SourceConfig) (connectors.Source, error) { return nil, nil }
	cases := []struct {
		name string
		edit func(r *Registry)
		want string
	}{
		{"a type twice", func(r *Registry) { r.Sources = append(r.Sources, r.Sources[0]) }, `source "a": registered twice`},
		{"no constructor", func(r *Registry) { r.Sources[1].Open = nil }, `source "b": registered twice, unnamed or without a constructor`},
		{"settings not a struct pointer", func(r *Registry) { r.Sources[2].Config = func() any { return watchSettings{} } }, "not a pointer to a struct"},
		{"a key without a doc", func(r *Registry) { r.Sources[2].Config = func() any { return &undocumented{Depth: 1} } }, "key depth has no doc or default tag"},
		{"a key every source reads", func(r *Registry) {
			r.Sources = append(r.Sources, Source{Type: "d", Open: open, Config: func() any { return &shadowing{} }})
		},
			"key path is declared twice"},
		{"a key twice", func(r *Registry) {
			r.Sources = append(r.Sources, Source{Type: "d", Open: open, Config: func() any { return &twice{} }})
		}, "key watch is declared twice"},
		{"inline rules not applied", func(r *Registry) { r.Sources[2].Config = func() any { return &unvalidated{} } },
			"the settings inline watchSettings, which has a Validate, but have none themselves"},
		{"a default tag that is not the default", func(r *Registry) {
			r.Sinks = append(r.Sinks, Sink{Type: "s", Open: func(context.Context, SinkConfig, SinkEnv) (connectors.Sink, error) { return nil, nil },
				Output: func(SinkConfig) string { return "" }, Config: func() any { return &wrongDefault{Depth: 2} }})
		}, `sink "s": key depth: the default tag says "3", Config gives 2`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := testRegistry()
			c.edit(r)
			if err := r.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%v, want %q", err, c.want)
			}
		})
	}
}

type dirSettings struct {
	Dir string `yaml:"dir" default:"—" doc:"folder"`
}

func (d dirSettings) SinkDir() string { return d.Dir }

// Dir is the folder of a sink whose settings say one, "" for any other.
func TestSinkDir(t *testing.T) {
	if got := (SinkConfig{Type: "files", Settings: &dirSettings{Dir: "out/v"}}).Dir(); got != "out/v" {
		t.Fatalf("Dir() = %q", got)
	}
	if got := (SinkConfig{Type: "db", Settings: &watchSettings{}}).Dir(); got != "" {
		t.Fatalf("Dir() of a sink without a folder = %q", got)
	}
}

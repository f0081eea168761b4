package registry

import (
	"fmt"
	"strings"
	"testing"

	"github.com/reignpipe/reignpipe/connectors"
)

func testRegistry() *Registry {
	open := func(SourceConfig) (connectors.Source, error) { return nil, nil }
	return &Registry{Sources: []Source{
		{Type: "a", Keys: []Key{{Name: "watch"}, {Name: "sections"}}, Open: open},
		{Type: "b", Keys: []Key{{Name: "watch"}}, Open: open,
			Validate: func(c SourceConfig, bad Bad) error {
				if c.Pattern == "" && c.Watch {
					return bad("watch", "needs a pattern")
				}
				return nil
			}},
		{Type: "c", Open: open},
	}}
}

func bad(key, format string, args ...any) error {
	return fmt.Errorf("source.%s: %s", key, fmt.Sprintf(format, args...))
}

func TestCheckSource(t *testing.T) {
	r := testRegistry()
	cases := []struct {
		c    SourceConfig
		want string // "" = accepted
	}{
		{SourceConfig{Type: "a", Watch: true, Sections: []string{"x"}}, ""},
		{SourceConfig{Type: "z"}, `source.type: unknown source "z" (a, b, c)`},
		{SourceConfig{Type: "b", Sections: []string{"x"}}, "source.sections: applies only to the a source"},
		{SourceConfig{Type: "c", Watch: true}, "source.watch: applies only to the a and b sources"},
		{SourceConfig{Type: "c", Sections: []string{}}, ""}, // an empty list is no list
		{SourceConfig{Type: "b", Watch: true}, "source.watch: needs a pattern"},
	}
	for _, tc := range cases {
		err := r.CheckSource(tc.c, SourceConfig{}, bad)
		if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.c, err, tc.want)
		}
	}
}

func TestValidateRefusesDuplicates(t *testing.T) {
	r := testRegistry()
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	r.Sources = append(r.Sources, r.Sources[0])
	if err := r.Validate(); err == nil {
		t.Fatal("a type registered twice was accepted")
	}
	r = testRegistry()
	r.Sources[1].Open = nil
	if err := r.Validate(); err == nil {
		t.Fatal("a type without a constructor was accepted")
	}
}

package pipelines

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/reignpipe/reignpipe/pipelines/components"
	"github.com/reignpipe/reignpipe/pipelines/registry"
)

// goWords are what a message about a pipeline file must never say: Go type and package names
// and the YAML library's own wording. ("sinks[].dsn" is the README's way to write a key of
// every sinks entry; "[]string" is Go's.)
var goWords = regexp.MustCompile(`pipelines\.|registry\.|\[\]\w|\bint(64|32)?\b|\bstring\b|\bfloat|yaml:|unmarshal|!!`)

// A pipeline file's mistakes are reported with the YAML path, the line, and the nearest valid
// key or the kind of value the key takes -- never in Go's words.
func TestShapeMessages(t *testing.T) {
	src := func(extra string) string { // a line in the source section, after path (line 6)
		return strings.Replace(minimal, "  path: in.jsonl\n", "  path: in.jsonl\n"+extra, 1)
	}
	cases := []struct{ name, yaml, want string }{
		{"top-level typo", minimal + "chunkng:\n  k: 256\n", "line 9: chunkng: unknown key; did you mean chunking?"},
		{"capitalised key", minimal + "Chunking:\n  k: 256\n", "line 9: Chunking: unknown key; did you mean chunking?"},
		{"nested typo", minimal + "chunking:\n  kk: 256\n", "line 10: chunking.kk: unknown key; did you mean chunking.k?"},
		{"swapped letters", minimal + "batching:\n  max_wiat: 5ms\n", "line 10: batching.max_wiat: unknown key; did you mean batching.max_wait?"},
		{"key at the wrong level", minimal + "k: 256\n", "line 9: k: unknown key; did you mean chunking.k?"},
		{"source component key", src("  patern: '*.jsonl'\n"), "line 6: source.patern: unknown key; did you mean source.pattern?"},
		{"sink key", minimal + "    dri: out/w\n", "line 9: sinks.0.dri: unknown key; did you mean sinks.0.dir?"},
		{"aggregate key", minimal + "aggregate:\n  checkpiont: ck\n", "line 10: aggregate.checkpiont: unknown key; did you mean aggregate.checkpoint? (it applies only to the reign aggregator)"},
		{"reign key", minimal + "aggregate:\n  type: reign\n  checkpiont: ck\n", "line 11: aggregate.checkpiont: unknown key; did you mean aggregate.checkpoint?"},
		{"a key of no sink", minimal + "    colour: red\n", "line 9: sinks.0.colour: unknown key (a parquet sink takes type, dir)"},
		{"a key of the pipeline in a sink", minimal + "    state_dir: s\n", "line 9: sinks.0.state_dir: unknown key; did you mean run.state_dir?"},
		{"a sink key at the top", minimal + "batch_rows: 10\n", "line 9: batch_rows: unknown key; did you mean sinks[].batch_rows?"},
		{"sink without a type", strings.Replace(minimal, "  - type: parquet\n", "  - dir: out/w\n", 1), "line 7: sinks.0.type: missing: a sink is parquet, jsonl, kafka or pgvector"},
		{"sink type not a word", strings.Replace(minimal, "type: parquet", "type: [parquet]", 1), "line 7: sinks.0.type: expected a single value, got a list"},
		{"unknown sink type before its keys", strings.Replace(minimal, "type: parquet", "type: csv", 1), `line 7: sinks.0.type: unknown sink "csv" (parquet, jsonl, kafka, pgvector)`},
		{"kafka key", minimal + "transport:\n  kafka:\n    broker: [b:9092]\n", "line 11: transport.kafka.broker: unknown key; did you mean transport.kafka.brokers?"},
		{"nothing near", minimal + "colour: red\n", "line 9: colour: unknown key (a pipeline file takes version, name, source, runtime, gn, chunking, batching, cache, aggregate, sinks, dead_letter, run, transport, s3)"},
		{"nothing near in a section", minimal + "cache:\n  colour: red\n", "line 10: cache.colour: unknown key (cache takes dir, rows_per_shard)"},
		{"written twice", minimal + "chunking:\n  k: 256\n  k: 128\n", "line 11: chunking.k: written twice (also on line 10)"},
		{"whole number", minimal + "chunking:\n  k: abc\n", `line 10: chunking.k: "abc" is not a whole number`},
		{"wrong type under run", minimal + "run:\n  queue: many\n", `line 10: run.queue: "many" is not a whole number`},
		{"big number", minimal + "run:\n  inflight_bytes: 64MiB\n", `line 10: run.inflight_bytes: "64MiB" is not a whole number`},
		{"duration", minimal + "batching:\n  max_wait: soon\n", `line 10: batching.max_wait: "soon" is not a duration like 5s or 20ms`},
		{"source duration", src("  poll: often\n"), `line 6: source.poll: "often" is not a duration like 5s or 20ms`},
		{"boolean", src("  watch: maybe\n"), `line 6: source.watch: "maybe" is not true or false`},
		{"list expected", strings.Replace(src("  sections: claims\n"), "type: jsonl", "type: uspto", 1), `line 6: source.sections: expected a list (items on lines starting with "- ", or [a, b]), got "claims"`},
		{"brokers not a list", minimal + "transport:\n  kafka:\n    brokers: b:9092\n", `line 11: transport.kafka.brokers: expected a list`},
		{"sinks not a list", strings.Replace(minimal, "sinks:\n  - type: parquet\n    dir: out/v\n", "sinks: parquet\n", 1), `line 6: sinks: expected a list`},
		{"section expected", minimal + "gn: bge-small-en-v15\n", `line 9: gn: expected a section of keys (key: value lines indented under it), got "bge-small-en-v15"`},
		{"value expected", minimal + "cache:\n  dir: [a, b]\n", "line 10: cache.dir: expected a single value, got a list"},
		{"syntax", minimal + "chunking: [\n", "line 9: did not find expected node content"},
		{"a list for a file", "- a\n- b\n", "line 1: the pipeline file: expected a section of keys"},
		{"a sink that is a word", strings.Replace(minimal, "  - type: parquet\n    dir: out/v\n", "  - parquet\n", 1), `line 7: sinks.0: expected a section of keys (key: value lines indented under it), got "parquet"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.yaml))
			if err == nil {
				t.Fatalf("accepted:\n%s", c.yaml)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q\ndoes not contain %q", err, c.want)
			}
			if goWords.MatchString(err.Error()) {
				t.Fatalf("error %q speaks Go", err)
			}
		})
	}
}

// Aliases and merge keys are YAML a user may write; the shape check follows them.
func TestShapeFollowsAliases(t *testing.T) {
	ok := minimal + "x-defaults: &d\n  k: 256\n"
	if _, err := Parse([]byte(ok)); err == nil || !strings.Contains(err.Error(), "x-defaults: unknown key") {
		t.Fatalf("an unknown top-level anchor holder: %v", err)
	}
	merged := minimal + "chunking:\n  <<: {k: 256, s: 128}\n  mode: fixed\n"
	c, err := Parse([]byte(merged))
	if err != nil || c.Chunking.K != 256 || c.Chunking.S != 128 {
		t.Fatalf("merge key: %+v, %v", c, err)
	}
	bad := minimal + "chunking:\n  <<: {k: 256, ss: 128}\n"
	if _, err := Parse([]byte(bad)); err == nil || !strings.Contains(err.Error(), "chunking.ss: unknown key; did you mean chunking.s?") {
		t.Fatalf("a typo in a merged mapping: %v", err)
	}
}

// Every key a component type declares is taken under that type and refused under every other
// type of its role, naming the types that take it: the shape check reads each type's settings.
func TestComponentKeysFollowTheType(t *testing.T) {
	reg := components.Builtin()
	sh := newShape(reg)
	type role struct {
		section, owner string
		types          []string
		keys           func(typ string) []registry.Key
		doc            func(typ, key string) string // the section holding key under type typ
	}
	sourceKeys := func(typ string) []registry.Key { s, _ := reg.Source(typ); return s.Keys() }
	sinkKeys := func(typ string) []registry.Key { s, _ := reg.Sink(typ); return s.Keys() }
	aggKeys := func(typ string) []registry.Key { a, _ := reg.Aggregator(typ); return a.Keys() }
	roles := []role{
		{"source", "source", reg.SourceTypes(), sourceKeys, func(typ, key string) string {
			return fmt.Sprintf("source:\n  type: %s\n  %s:\n", typ, key)
		}},
		{"sinks.0", "sink", reg.SinkTypes(), sinkKeys, func(typ, key string) string {
			return fmt.Sprintf("sinks:\n  - type: %s\n    %s:\n", typ, key)
		}},
		{"aggregate", "aggregator", reg.AggregatorTypes(), aggKeys, func(typ, key string) string {
			return fmt.Sprintf("aggregate:\n  type: %s\n  %s:\n", typ, key)
		}},
	}
	checked := 0
	for _, ro := range roles {
		owners := map[string][]string{}
		for _, typ := range ro.types {
			for _, k := range ro.keys(typ) {
				owners[k.Name] = append(owners[k.Name], typ)
			}
		}
		for key, own := range owners {
			for _, typ := range ro.types {
				var root yaml.Node
				if err := yaml.Unmarshal([]byte(ro.doc(typ, key)), &root); err != nil {
					t.Fatal(err)
				}
				err := sh.checkShape(root.Content[0])
				if slices.Contains(own, typ) {
					if err != nil {
						t.Errorf("%s.%s under %s: %v", ro.section, key, typ, err)
					}
					continue
				}
				want := fmt.Sprintf("line 3: %s.%s: %s", ro.section, key, appliesOnly(own, ro.owner))
				if err == nil || err.Error() != want {
					t.Errorf("%s.%s under %s: %v, want %q", ro.section, key, typ, err, want)
				}
				checked++
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d refusals checked", checked)
	}
}

// Each type's keys are documented, with defaults that say what the type's Config gives.
func TestComponentSettingsDeclared(t *testing.T) {
	if err := components.Builtin().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestNearestKey(t *testing.T) {
	keys := []string{"type", "path", "index", "name", "workers", "sections", "watch", "pattern", "poll", "settle", "max_doc_bytes"}
	cases := []struct{ written, want string }{
		{"typ", "type"},
		{"pth", "path"},
		{"patern", "pattern"},
		{"sectoins", "sections"},
		{"max_doc_byte", "max_doc_bytes"},
		{"max_doc", "max_doc_bytes"}, // a prefix
		{"WORKERS", "workers"},
		{"colour", ""},
		{"zz", ""},
	}
	for _, c := range cases {
		if got := Nearest(c.written, keys); got != c.want {
			t.Errorf("Nearest(%q) = %q, want %q", c.written, got, c.want)
		}
	}
}

func TestEditDistance(t *testing.T) {
	cases := []struct {
		a, b string
		d    int
	}{
		{"", "", 0}, {"k", "", 1}, {"chunkng", "chunking", 1}, {"max_wiat", "max_wait", 1},
		{"kitten", "sitting", 3}, {"abc", "abc", 0},
	}
	for _, c := range cases {
		if got := editDistance(c.a, c.b); got != c.d {
			t.Errorf("editDistance(%q, %q) = %d, want %d", c.a, c.b, got, c.d)
		}
	}
}

// What yaml.v3 says is translated when it reaches the user anyway.
func TestPlainYAMLError(t *testing.T) {
	cases := []struct{ in, want string }{
		{"yaml: unmarshal errors:\n  line 11: field chunkng not found in type pipelines.Config", "line 11: chunkng: unknown key"},
		{"yaml: unmarshal errors:\n  line 5: cannot unmarshal !!str `abc` into int", "line 5: \"abc\" is not a whole number"},
		{"yaml: line 3: mapping values are not allowed in this context", "line 3: mapping values are not allowed in this context"},
	}
	for _, c := range cases {
		got := plainYAMLError(errorString(c.in)).Error()
		if !strings.Contains(got, c.want) || goWords.MatchString(got) {
			t.Errorf("%q → %q, want %q", c.in, got, c.want)
		}
	}
}

type errorString string

func (e errorString) Error() string { return string(e) }

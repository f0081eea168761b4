package pipelines

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// env is a fixed environment for parse.
func env(vars map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	}
}

const envPipeline = `version: 1
name: t
source:
  type: jsonl
  path: %s
sinks:
  - type: parquet
    dir: out/v
`

// ${VAR} and ${VAR:-default} are expanded in values after parsing: what a variable holds can
// never add a key or a comment, a variable neither set nor defaulted is an error naming it,
// and plain values are read again for their type.
func TestEnvExpansion(t *testing.T) {
	pipeline := func(path string, extra ...string) string {
		return fmt.Sprintf(envPipeline, path) + strings.Join(extra, "")
	}
	cases := []struct {
		name  string
		yaml  string
		vars  map[string]string
		check func(c *Config) string // "" = as expected
		err   string                 // the error wanted; "" = none
	}{
		{name: "a newline and a key in the value stay in the value",
			yaml: pipeline("${IN}"), vars: map[string]string{"IN": "/data/x.jsonl\n  max_doc_bytes: 10"},
			check: func(c *Config) string {
				if c.Source.Path != "/data/x.jsonl\n  max_doc_bytes: 10" || c.Source.MaxDocBytes != 32<<20 {
					return fmt.Sprintf("path %q, max_doc_bytes %d", c.Source.Path, c.Source.MaxDocBytes)
				}
				return ""
			}},
		{name: "a # is not a comment",
			yaml: pipeline("${IN}/docs.jsonl", "cache:\n  dir: ${OUT}/cache # the chunk cache\n"), vars: map[string]string{"IN": "in #1", "OUT": "out/#2"},
			check: func(c *Config) string {
				if c.Source.Path != "in #1/docs.jsonl" || c.Cache.Dir != "out/#2/cache" {
					return fmt.Sprintf("path %q, cache %q", c.Source.Path, c.Cache.Dir)
				}
				return ""
			}},
		{name: "unset without a default", yaml: pipeline("${DUMP}/enwiki.xml.bz2"),
			err: "line 5: source.path: ${DUMP} is not set and has no default (write ${DUMP:-...} to give one)"},
		{name: "unset in a list", yaml: pipeline("in.jsonl", "transport:\n  type: kafka\n  kafka: {brokers: [\"b:9092\", ${BROKER}], topics: p}\n"),
			err: "line 11: transport.kafka.brokers.1: ${BROKER} is not set and has no default"},
		{name: "the unset one of two", yaml: pipeline("${IN}/${SUB}"), vars: map[string]string{"IN": "data"},
			err: "line 5: source.path: ${SUB} is not set"},
		{name: "set", yaml: pipeline("${IN}"), vars: map[string]string{"IN": "/data/x.jsonl"},
			check: func(c *Config) string { return want(c.Source.Path, "/data/x.jsonl") }},
		{name: "default when unset", yaml: pipeline("in.jsonl", "cache:\n  dir: ${NONE:-fallback}/cache\n"),
			check: func(c *Config) string { return want(c.Cache.Dir, "fallback/cache") }},
		{name: "default when empty, as in the shell", yaml: pipeline("in.jsonl", "cache:\n  dir: ${EMPTY:-fallback}/cache\n"), vars: map[string]string{"EMPTY": ""},
			check: func(c *Config) string { return want(c.Cache.Dir, "fallback/cache") }},
		{name: "empty without a default is empty", yaml: pipeline("in.jsonl", "cache:\n  dir: out${EMPTY}/cache\n"), vars: map[string]string{"EMPTY": ""},
			check: func(c *Config) string { return want(c.Cache.Dir, "out/cache") }},
		{name: "a plain value is read as a number", yaml: pipeline("in.jsonl", "run:\n  commit_every: ${N:-100}\n  queue: ${Q}\n"), vars: map[string]string{"Q": "7"},
			check: func(c *Config) string {
				return want(fmt.Sprint(c.Run.CommitEvery, " ", c.Run.Queue), "100 7")
			}},
		{name: "a plain value read as true", yaml: pipeline("in.jsonl", "gn:\n  optimized: ${OPT:-false}\n"),
			check: func(c *Config) string { return want(fmt.Sprint(c.GN.Optimized), "false") }},
		{name: "a quoted value stays a string", yaml: pipeline("in.jsonl", "run:\n  commit_every: \"${N:-100}\"\n"),
			err: `line 10: run.commit_every: "100" is not a whole number`},
		{name: "a bad number says the expanded value", yaml: pipeline("in.jsonl", "run:\n  queue: ${Q}\n"), vars: map[string]string{"Q": "many"},
			err: `line 10: run.queue: "many" is not a whole number`},
		{name: "in a flow list", yaml: pipeline("in.jsonl", "transport:\n  type: kafka\n  kafka:\n    brokers: [${B:-127.0.0.1:19092}, ${C}]\n    topics: p\n"),
			vars: map[string]string{"C": "k2:9092"},
			check: func(c *Config) string {
				return want(strings.Join(c.Transport.Kafka.Brokers, " "), "127.0.0.1:19092 k2:9092")
			}},
		{name: "in a flow mapping", yaml: "version: 1\nname: t\nsource: {type: jsonl, path: ${IN:-a.jsonl}}\nsinks: [{type: jsonl, dir: ${OUT}}]\n", vars: map[string]string{"OUT": "o"},
			check: func(c *Config) string { return want(c.Source.Path+" "+c.Sinks[0].Dir(), "a.jsonl o") }},
		{name: "REIGNPIPE_HOME defaults to Home()", yaml: pipeline("${REIGNPIPE_HOME}/in.jsonl"),
			check: func(c *Config) string { return want(c.Source.Path, Home()+"/in.jsonl") }},
		{name: "a written default wins over Home()", yaml: pipeline("${REIGNPIPE_HOME:-/opt/rp}/in.jsonl"),
			check: func(c *Config) string { return want(c.Source.Path, "/opt/rp/in.jsonl") }},
		{name: "a value is not expanded twice", yaml: pipeline("${IN}"), vars: map[string]string{"IN": "${OTHER}"},
			check: func(c *Config) string { return want(c.Source.Path, "${OTHER}") }},
		{name: "an anchored value, used through an alias", yaml: pipeline("&p ${IN:-x.jsonl}", "dead_letter:\n  path: *p\n"),
			check: func(c *Config) string { return want(c.Source.Path+" "+c.DeadLetter.Path, "x.jsonl x.jsonl") }},
		{name: "a comment is not expanded", yaml: pipeline("in.jsonl # was ${UNSET}", "# ${ALSO_UNSET}\n"),
			check: func(c *Config) string { return want(c.Source.Path, "in.jsonl") }},
		{name: "not a reference", yaml: pipeline("\"${1}/$HOME/${A-b}\""),
			check: func(c *Config) string { return want(c.Source.Path, "${1}/$HOME/${A-b}") }},
		{name: "a reference in a key", yaml: pipeline("in.jsonl", "${KEY}: 1\n"), vars: map[string]string{"KEY": "chunking"},
			err: "line 9: ${KEY}: an environment reference in a key"},
		{name: "a syntax error says the reference as written", yaml: pipeline("in.jsonl", "run: [${A}\n"),
			err: "did not find expected"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := parse([]byte(c.yaml), env(c.vars))
			switch {
			case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
				t.Fatalf("%v, want %q", err, c.err)
			case c.err != "":
				if strings.Contains(err.Error(), "reignpipe_env_ref_") {
					t.Fatalf("the error shows a placeholder: %v", err)
				}
			case err != nil:
				t.Fatal(err)
			default:
				if why := c.check(cfg); why != "" {
					t.Fatal(why)
				}
			}
		})
	}
	var fe *FieldError
	if _, err := parse([]byte(pipeline("${DUMP}")), env(nil)); !errors.As(err, &fe) || fe.Path != "source.path" || fe.Line != 5 {
		t.Fatalf("%v is not a located error", err)
	}
}

func want(got, want string) string {
	if got != want {
		return fmt.Sprintf("got %q, want %q", got, want)
	}
	return ""
}

// shapeOf writes a parsed document's structure: every key with its path, and the kind of every
// node (not the scalars' values).
func shapeOf(n *yaml.Node, path string, b *strings.Builder) {
	fmt.Fprintf(b, "%s:%d;", path, n.Kind)
	switch n.Kind {
	case yaml.DocumentNode, yaml.SequenceNode:
		for i, c := range n.Content {
			shapeOf(c, fmt.Sprint(path, "[", i, "]"), b)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			shapeOf(n.Content[i+1], path+"."+n.Content[i].Value, b)
		}
	}
}

// No value makes an expansion add a key, drop one, change the document's structure or panic:
// a document expanded with the fuzzed value has the shape it has with a plain word.
func FuzzExpand(f *testing.F) {
	f.Add([]byte(fmt.Sprintf(envPipeline, "${IN}")), "/x.jsonl\n  max_doc_bytes: 10")
	f.Add([]byte("a: [${A}, ${B:-x}]\nb: {c: ${C}}\n"), "1, 2]\nd: [3")
	f.Add([]byte("a: ${A} # c\nb: '${B}'\nc: \"${C:-\\\"}\"\n"), "# x\n- y")
	f.Add([]byte("a: &x ${A}\nb: *x\nc: |\n  ${A}\n"), "}\n:\n  -")
	f.Add([]byte("${A}: 1\n"), "k")
	f.Fuzz(func(t *testing.T, data []byte, value string) {
		text, refs := protect(data)
		var plain, fuzzed yaml.Node
		if yaml.Unmarshal(text, &plain) != nil || yaml.Unmarshal(text, &fuzzed) != nil {
			return
		}
		errPlain := refs.expandEnv(&plain, func(string) (string, bool) { return "word", true })
		errFuzzed := refs.expandEnv(&fuzzed, func(string) (string, bool) { return value, true })
		if (errPlain == nil) != (errFuzzed == nil) {
			t.Fatalf("expanding %q: %v, with a plain word: %v", value, errFuzzed, errPlain)
		}
		var a, b strings.Builder
		shapeOf(&plain, "", &a)
		shapeOf(&fuzzed, "", &b)
		if a.String() != b.String() {
			t.Fatalf("the value %q changed the document's shape:\n%s\n%s", value, b.String(), a.String())
		}
		_, _ = parse(data, func(string) (string, bool) { return value, true }) // no panic
	})
}

package pipelines

import (
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Environment references -- ${VAR} and ${VAR:-default} -- are expanded in the values of the
// parsed YAML, never in its text: a value's expansion cannot add a key, end in a comment or
// change the document's structure, whatever the variable holds (a path with a newline and
// "max_doc_bytes: 10" after it, a "#" in a folder name). Parsing comes first, with each
// reference replaced by a placeholder token that is a plain word in every YAML context (a
// ${...} in a flow list, [${BROKERS}], is not valid YAML as written); the tokens are then
// replaced in the scalars' values. A plain (unquoted) value is resolved again after its
// expansion, so commit_every: ${N:-100} is still a number; a quoted one stays a string.
//
// ${VAR:-default} means what it means in the shell: the default when VAR is unset or empty. A
// ${VAR} that is unset and has no default is an error naming it, its key and its line (the
// shell would expand it to nothing, and ${DUMP}/enwiki.xml.bz2 would quietly read
// /enwiki.xml.bz2); one set to the empty string is empty. REIGNPIPE_HOME unset and without a
// default is Home(). A default is taken as written (it is not expanded again), and a reference
// in a key is refused: keys are the pipeline's shape, which the environment does not choose.

// envRef is one reference; a default holds neither "}" nor a line break.
var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}\n]*))?\}`)

// envRefs are the references of one pipeline file, in the order they appear, and the token
// that stands for each in the parsed YAML: token + index + "_".
type envRefs struct {
	token string
	refs  []envReference
	find  *regexp.Regexp // token(\d+)_
}

type envReference struct {
	text, name, def string
	hasDef          bool
}

// protect replaces each reference in data by its token. The token is a word data does not
// hold, so every token found later is one of these.
func protect(data []byte) ([]byte, *envRefs) {
	r := &envRefs{token: "reignpipe_env_ref_"}
	for bytes.Contains(data, []byte(r.token)) {
		r.token += "x"
	}
	r.find = regexp.MustCompile(regexp.QuoteMeta(r.token) + `([0-9]+)_`)
	out := envRef.ReplaceAllFunc(data, func(m []byte) []byte {
		sub := envRef.FindSubmatch(m)
		r.refs = append(r.refs, envReference{text: string(m), name: string(sub[1]), def: string(sub[3]), hasDef: sub[2] != nil})
		return []byte(r.token + strconv.Itoa(len(r.refs)-1) + "_")
	})
	return out, r
}

// restore writes s with its tokens back as the references they stand for (for messages).
func (r *envRefs) restore(s string) string {
	return r.find.ReplaceAllStringFunc(s, func(m string) string { return r.refs[r.index(m)].text })
}

func (r *envRefs) index(tok string) int {
	i, _ := strconv.Atoi(r.find.FindStringSubmatch(tok)[1])
	return i
}

// expandEnv expands the references in every value under n (the document's top node); lookup
// is os.LookupEnv outside tests.
func (r *envRefs) expandEnv(n *yaml.Node, lookup func(string) (string, bool)) error {
	if len(r.refs) == 0 {
		return nil
	}
	return r.expandNode(n, "", lookup)
}

func (r *envRefs) expandNode(n *yaml.Node, path string, lookup func(string) (string, bool)) error {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if err := r.expandNode(c, path, lookup); err != nil {
				return err
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			key := r.restore(k.Value)
			if key != k.Value {
				return &FieldError{Path: join(path, key), Line: k.Line,
					Reason: "an environment reference in a key: ${...} is expanded in values only (keys are the pipeline's shape)"}
			}
			if err := r.expandNode(v, join(path, key), lookup); err != nil {
				return err
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			if err := r.expandNode(c, join(path, strconv.Itoa(i)), lookup); err != nil {
				return err
			}
		}
	case yaml.ScalarNode:
		return r.expandScalar(n, path, lookup)
	}
	// An alias is its anchor's node, expanded where the anchor is: once.
	return nil
}

func (r *envRefs) expandScalar(n *yaml.Node, path string, lookup func(string) (string, bool)) error {
	if !strings.Contains(n.Value, r.token) {
		return nil
	}
	var missing *envReference
	v := r.find.ReplaceAllStringFunc(n.Value, func(m string) string {
		ref := &r.refs[r.index(m)]
		val, ok := lookup(ref.name)
		switch {
		case ok && val != "":
			return val
		case ref.hasDef:
			return ref.def
		case ok:
			return "" // set to the empty string, as the shell has it
		case ref.name == "REIGNPIPE_HOME":
			return Home()
		}
		if missing == nil {
			missing = ref
		}
		return ""
	})
	if missing != nil {
		if path == "" {
			path = "the pipeline file"
		}
		return &FieldError{Path: path, Line: n.Line,
			Reason: fmt.Sprintf("%s is not set and has no default (write ${%s:-...} to give one)", missing.text, missing.name)}
	}
	n.Value = v
	if n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle|yaml.TaggedStyle) == 0 {
		// A plain value takes the type its expansion reads as (a number, true, nothing), as it
		// would written out; quoting one keeps it a string.
		n.Tag = ""
		n.Tag = n.ShortTag()
	}
	return nil
}

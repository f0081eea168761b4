package pipelines

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// The pipeline file is checked against the Config struct's shape before it is decoded, so that
// a typo or a wrong kind of value is reported in the user's terms -- the key's YAML path, its
// line, the nearest valid key or the kind of value expected -- instead of yaml.v3's ("field
// chunkng not found in type pipelines.Config", "cannot unmarshal !!str `abc` into int"), which
// name Go types a user never wrote.

var unmarshalerType = reflect.TypeOf((*yaml.Unmarshaler)(nil)).Elem()

// checkShape reports the first key that Config does not have, or value of the wrong kind, in
// document order. n is the document's top mapping.
func checkShape(n *yaml.Node) error {
	return checkNode(n, reflect.TypeOf(Config{}), "")
}

func checkNode(n *yaml.Node, t reflect.Type, path string) error {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if isNull(n) {
		return nil // an empty value leaves the default, as the decoder does
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		if err := n.Decode(reflect.New(t).Interface()); err != nil {
			return &FieldError{Path: path, Line: n.Line, Reason: fmt.Sprintf("%q is not %s", n.Value, expected(t))}
		}
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return wrongKind(n, t, path)
		}
		return checkMapping(n, t, path)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return wrongKind(n, t, path)
		}
		for i, e := range n.Content {
			if err := checkNode(e, t.Elem(), join(path, strconv.Itoa(i))); err != nil {
				return err
			}
		}
		return nil
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return wrongKind(n, t, path)
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			if err := checkNode(n.Content[i+1], t.Elem(), join(path, n.Content[i].Value)); err != nil {
				return err
			}
		}
		return nil
	case reflect.Interface:
		return nil
	}
	if n.Kind != yaml.ScalarNode {
		return wrongKind(n, t, path)
	}
	if err := n.Decode(reflect.New(t).Interface()); err != nil {
		return &FieldError{Path: path, Line: n.Line, Reason: fmt.Sprintf("%q is not %s", n.Value, expected(t))}
	}
	return nil
}

// checkMapping checks a section's keys against the struct t: unknown keys (with the nearest
// valid one), keys written twice, then each value.
func checkMapping(n *yaml.Node, t reflect.Type, path string) error {
	fields := yamlFields(t)
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Tag == "!!merge" { // <<: *anchor merges another mapping's keys into this one
			if err := checkMerge(v, t, path); err != nil {
				return err
			}
			continue
		}
		f, ok := fields[k.Value]
		if !ok {
			return unknownKey(k, path, fields)
		}
		if first, dup := seen[k.Value]; dup {
			return &FieldError{Path: join(path, k.Value), Line: k.Line, Reason: fmt.Sprintf("written twice (also on line %d)", first)}
		}
		seen[k.Value] = k.Line
		if err := checkNode(v, f.Type, join(path, k.Value)); err != nil {
			return err
		}
	}
	return nil
}

func checkMerge(v *yaml.Node, t reflect.Type, path string) error {
	for v.Kind == yaml.AliasNode && v.Alias != nil {
		v = v.Alias
	}
	if v.Kind == yaml.SequenceNode {
		for _, e := range v.Content {
			if err := checkMerge(e, t, path); err != nil {
				return err
			}
		}
		return nil
	}
	return checkNode(v, t, path)
}

// yamlFields maps a struct's YAML keys to its fields (inline structs' keys included).
func yamlFields(t reflect.Type) map[string]reflect.StructField {
	out := map[string]reflect.StructField{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := strings.Split(f.Tag.Get("yaml"), ",")
		if tag[0] == "-" {
			continue
		}
		if slices.Contains(tag[1:], "inline") {
			for k, v := range yamlFields(f.Type) {
				out[k] = v
			}
			continue
		}
		name := tag[0]
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out[name] = f
	}
	return out
}

// sortedKeys lists a section's keys in the order the struct declares them (the order the
// README's key table and the shipped pipeline files use).
func sortedKeys(fields map[string]reflect.StructField) []string {
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		return slices.Compare(fields[a].Index, fields[b].Index)
	})
	return keys
}

func unknownKey(k *yaml.Node, path string, fields map[string]reflect.StructField) error {
	e := &FieldError{Path: join(path, k.Value), Line: k.Line, Reason: "unknown key"}
	keys := sortedKeys(fields)
	if near := Nearest(k.Value, keys); near != "" {
		e.Reason += "; did you mean " + join(path, near) + "?"
	} else if elsewhere := keyElsewhere(k.Value, path); elsewhere != "" {
		e.Reason += "; did you mean " + elsewhere + "?"
	} else {
		where := "a pipeline file"
		if path != "" {
			where = displayPath(path)
		}
		e.Reason += fmt.Sprintf(" (%s takes %s)", where, strings.Join(keys, ", "))
	}
	return e
}

// keyElsewhere finds a key written at the wrong level: the path of the one section, other than
// where it was written, that has a key of this name.
func keyElsewhere(key, written string) string {
	var found []string
	var walk func(t reflect.Type, path string, depth int)
	walk = func(t reflect.Type, path string, depth int) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
			if t.Kind() == reflect.Slice {
				path += "[]"
			}
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || reflect.PointerTo(t).Implements(unmarshalerType) || depth > 4 {
			return
		}
		for name, f := range yamlFields(t) {
			p := join(path, name)
			if strings.EqualFold(name, key) && path != written {
				found = append(found, p)
			}
			walk(f.Type, p, depth+1)
		}
	}
	walk(reflect.TypeOf(Config{}), "", 0)
	if len(found) != 1 {
		return ""
	}
	return found[0]
}

// Nearest is the key (or flag) closest to what was written, if it is close enough to be a
// typo: at most one edit for short keys, two for longer ones (a swap of two letters is one
// edit); else the one key that what was written begins (max_doc for max_doc_bytes).
func Nearest(written string, keys []string) string {
	w := strings.ToLower(written)
	best, bestD := "", 1<<30
	for _, k := range keys {
		if d := editDistance(w, k); d < bestD {
			best, bestD = k, d
		}
	}
	limit := 1
	if len(w) > 5 {
		limit = 2
	}
	if bestD <= limit {
		return best
	}
	var prefixed []string
	for _, k := range keys {
		if len(w) >= 3 && strings.HasPrefix(k, w) {
			prefixed = append(prefixed, k)
		}
	}
	if len(prefixed) == 1 {
		return prefixed[0]
	}
	return ""
}

// editDistance is the optimal string alignment distance: insertions, deletions, substitutions
// and swaps of adjacent letters each count one.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}

func wrongKind(n *yaml.Node, t reflect.Type, path string) error {
	got := "a list"
	switch n.Kind {
	case yaml.MappingNode:
		got = "a section of keys"
	case yaml.ScalarNode:
		got = strconv.Quote(n.Value)
	}
	if path == "" {
		path = "the pipeline file" // its top level: a scalar or a list where keys belong
	}
	return &FieldError{Path: path, Line: n.Line, Reason: fmt.Sprintf("expected %s, got %s", expected(t), got)}
}

// expected names the kind of value a Go type takes, in the words of the YAML a user writes.
func expected(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t {
	case reflect.TypeOf(Duration{}):
		return "a duration like 5s or 20ms"
	case reflect.TypeOf(Retention("")):
		return `a duration like 168h or 30d, or "forever"`
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "a whole number"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number >= 0"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a single value"
	case reflect.Slice:
		return "a list (items on lines starting with \"- \", or [a, b])"
	case reflect.Struct, reflect.Map:
		return "a section of keys (key: value lines indented under it)"
	}
	return "another kind of value"
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// displayPath writes a dotted path the way the README's key table does: sinks.0 as sinks[0].
func displayPath(path string) string {
	parts := strings.Split(path, ".")
	var b strings.Builder
	for i, p := range parts {
		if _, err := strconv.Atoi(p); err == nil && i > 0 {
			b.WriteString("[" + p + "]")
			continue
		}
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(p)
	}
	return b.String()
}

var (
	yamlFieldRe = regexp.MustCompile(`field (\S+) not found in type \S+`)
	yamlTypeRe  = regexp.MustCompile("cannot unmarshal !!\\w+ `([^`]*)` into (\\S+)")
	yamlGoType  = regexp.MustCompile(`\b(?:[a-z]\w*\.)+[A-Z]\w*\b`)
)

// plainYAMLError rewrites what yaml.v3 says about a file (syntax errors, and decode errors
// the shape check did not foresee) without its Go type names.
func plainYAMLError(err error) error {
	var te *yaml.TypeError
	msgs := []string{err.Error()}
	if errors.As(err, &te) {
		msgs = te.Errors
	}
	if len(msgs) == 1 { // the error's text: "yaml: unmarshal errors:\n  line 3: ...\n  line 5: ..."
		m := strings.TrimPrefix(strings.TrimPrefix(msgs[0], "yaml: "), "unmarshal errors:\n")
		msgs = strings.Split(m, "\n")
	}
	for i, m := range msgs {
		m = strings.TrimSpace(strings.TrimPrefix(m, "yaml: "))
		m = yamlFieldRe.ReplaceAllString(m, "$1: unknown key")
		m = yamlTypeRe.ReplaceAllStringFunc(m, func(s string) string {
			sub := yamlTypeRe.FindStringSubmatch(s)
			return fmt.Sprintf("%q is not %s", sub[1], goTypeWords(sub[2]))
		})
		msgs[i] = yamlGoType.ReplaceAllString(m, "a value")
	}
	return errors.New(strings.Join(msgs, "; "))
}

// goTypeWords names a Go type as yaml.v3 prints it ("int", "[]string") in the user's words.
func goTypeWords(goType string) string {
	switch {
	case strings.HasPrefix(goType, "[]"):
		return "a list"
	case strings.HasPrefix(goType, "map["):
		return "a section of keys"
	case strings.HasPrefix(goType, "int"):
		return "a whole number"
	case strings.HasPrefix(goType, "uint"):
		return "a whole number >= 0"
	case strings.HasPrefix(goType, "float"):
		return "a number"
	case goType == "bool":
		return "true or false"
	case goType == "string":
		return "a single value"
	}
	return "the kind of value this key takes"
}

package pipelines

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/reignpipe/reignpipe/pipelines/registry"
)

// The pipeline file is checked against the Config struct's shape -- and each component section
// against the settings struct of the type it names -- before it is decoded, so that
// a typo or a wrong kind of value is reported in the user's terms -- the key's YAML path, its
// line, the nearest valid key or the kind of value expected -- instead of yaml.v3's ("field
// chunkng not found in type pipelines.Config", "cannot unmarshal !!str `abc` into int"), which
// name Go types a user never wrote.

var (
	unmarshalerType = reflect.TypeOf((*yaml.Unmarshaler)(nil)).Elem()
	durationType    = reflect.TypeOf(time.Duration(0))
)

// shape is what the check knows beyond Config's own struct: for each component section (its
// struct of the keys every type reads), the types and the struct of each type's own keys.
type shape struct {
	sections map[reflect.Type]*componentShape
}

// componentShape is one role's section: source, sinks[] or aggregate.
type componentShape struct {
	noun        string // "sink": "unknown sink", "a parquet sink takes"
	owner       string // "sink": "applies only to the pgvector sink"
	path        string // where the section is, as keyElsewhere writes it: "sinks[]"
	defaultType string // the type when none is written ("" = one must be)
	types       []string
	settings    map[string]reflect.Type // type -> its settings struct; absent: no keys of its own
	check       func(typ string, bad registry.Bad) error
}

func newShape(reg *registry.Registry) *shape {
	def := Defaults()
	src := &componentShape{noun: "source", owner: "source", path: "source", defaultType: def.Source.Type, types: reg.SourceTypes(), settings: map[string]reflect.Type{},
		check: func(typ string, bad registry.Bad) error { return reg.CheckSource(SourceConfig{Type: typ}, bad) }}
	for _, s := range reg.Sources {
		src.add(s.Type, s.Config)
	}
	sink := &componentShape{noun: "sink", owner: "sink", path: "sinks[]", types: reg.SinkTypes(), settings: map[string]reflect.Type{},
		check: func(typ string, bad registry.Bad) error { return reg.CheckSink(SinkConfig{Type: typ}, bad) }}
	for _, s := range reg.Sinks {
		sink.add(s.Type, s.Config)
	}
	agg := &componentShape{noun: "aggregation", owner: "aggregator", path: "aggregate", defaultType: def.Aggregate.Type, types: reg.AggregatorTypes(), settings: map[string]reflect.Type{},
		check: func(typ string, bad registry.Bad) error { return reg.CheckAggregate(AggregateConfig{Type: typ}, bad) }}
	for _, a := range reg.Aggregators {
		agg.add(a.Type, a.Config)
	}
	return &shape{sections: map[reflect.Type]*componentShape{
		reflect.TypeOf(SourceConfig{}): src, reflect.TypeOf(SinkConfig{}): sink, reflect.TypeOf(AggregateConfig{}): agg,
	}}
}

func (c *componentShape) add(typ string, config func() any) {
	if config != nil {
		c.settings[typ] = reflect.TypeOf(config()).Elem()
	}
}

// checkShape reports the first key that Config does not have, or value of the wrong kind, in
// document order. n is the document's top mapping.
func (sh *shape) checkShape(n *yaml.Node) error {
	return sh.checkNode(n, reflect.TypeOf(Config{}), "")
}

func (sh *shape) checkNode(n *yaml.Node, t reflect.Type, path string) error {
	n = resolveAlias(n)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if isNull(n) {
		return nil // an empty value leaves the default, as the decoder does
	}
	if c, ok := sh.sections[t]; ok {
		if n.Kind != yaml.MappingNode {
			return wrongKind(n, t, path)
		}
		return sh.checkComponent(n, t, c, path)
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
		ks := keysOf(t)
		return sh.checkMapping(n, ks, path, func(k *yaml.Node) error { return sh.unknownKey(k, path, ks.names, displayPath(path)) })
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return wrongKind(n, t, path)
		}
		for i, e := range n.Content {
			if err := sh.checkNode(e, t.Elem(), join(path, strconv.Itoa(i))); err != nil {
				return err
			}
		}
		return nil
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return wrongKind(n, t, path)
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			if err := sh.checkNode(n.Content[i+1], t.Elem(), join(path, n.Content[i].Value)); err != nil {
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

// checkComponent checks a component section: its type first (the keys it may hold depend on
// it), then its keys against the section's common struct and the type's settings struct. A key
// of another type is named as that type's.
func (sh *shape) checkComponent(n *yaml.Node, common reflect.Type, c *componentShape, path string) error {
	typ := c.defaultType
	if tn := lookup(n, "type"); tn != nil && !isNull(tn) {
		if tn.Kind != yaml.ScalarNode {
			return wrongKind(tn, reflect.TypeOf(""), join(path, "type"))
		}
		typ = tn.Value
		if !slices.Contains(c.types, typ) {
			return c.check(typ, func(key, format string, args ...any) error {
				return &FieldError{Path: join(path, key), Line: tn.Line, Reason: fmt.Sprintf(format, args...)}
			})
		}
	} else if typ == "" {
		return &FieldError{Path: join(path, "type"), Line: n.Line, Reason: fmt.Sprintf("missing: a %s is %s", c.noun, orList(c.types))}
	}
	ks := keysOf(common)
	if st, ok := c.settings[typ]; ok {
		ks = ks.with(keysOf(st))
	}
	return sh.checkMapping(n, ks, path, func(k *yaml.Node) error {
		var owners []string
		for _, other := range c.types {
			if st, ok := c.settings[other]; ok && other != typ && slices.Contains(keysOf(st).names, k.Value) {
				owners = append(owners, other)
			}
		}
		if len(owners) > 0 {
			return &FieldError{Path: join(path, k.Value), Line: k.Line, Reason: appliesOnly(owners, c.owner)}
		}
		if Nearest(k.Value, ks.names) == "" {
			// A typo of another type's key: said as such, so the user learns both.
			others := map[string][]string{}
			var names []string
			for _, other := range c.types {
				if st, ok := c.settings[other]; ok && other != typ {
					for _, name := range keysOf(st).names {
						if others[name] == nil {
							names = append(names, name)
						}
						others[name] = append(others[name], other)
					}
				}
			}
			if near := Nearest(k.Value, names); near != "" {
				return &FieldError{Path: join(path, k.Value), Line: k.Line,
					Reason: fmt.Sprintf("unknown key; did you mean %s? (it %s)", join(path, near), appliesOnly(others[near], c.owner))}
			}
		}
		return sh.unknownKey(k, path, ks.names, fmt.Sprintf("a %s %s", typ, c.noun))
	})
}

// appliesOnly is the reason a key of other types is refused: "applies only to the jsonl and
// uspto sources".
func appliesOnly(types []string, noun string) string {
	if len(types) == 1 {
		return fmt.Sprintf("applies only to the %s %s", types[0], noun)
	}
	return fmt.Sprintf("applies only to the %s and %s %ss", strings.Join(types[:len(types)-1], ", "), types[len(types)-1], noun)
}

// orList writes names as "a, b or c".
func orList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// sectionKeys are the keys a mapping may hold, in the order the README's key table and the
// shipped pipeline files use, with the Go type of each value.
type sectionKeys struct {
	names []string
	types map[string]reflect.Type
}

func keysOf(t reflect.Type) sectionKeys {
	ks := sectionKeys{types: map[string]reflect.Type{}}
	for _, f := range registry.Fields(t) {
		ks.names = append(ks.names, f.Name)
		ks.types[f.Name] = f.Type
	}
	return ks
}

func (ks sectionKeys) with(more sectionKeys) sectionKeys {
	out := sectionKeys{names: slices.Concat(ks.names, more.names), types: maps.Clone(ks.types)}
	maps.Copy(out.types, more.types)
	return out
}

// checkMapping checks a section's keys: unknown ones (unknown says why), keys written twice,
// then each value.
func (sh *shape) checkMapping(n *yaml.Node, ks sectionKeys, path string, unknown func(k *yaml.Node) error) error {
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Tag == "!!merge" { // <<: *anchor merges another mapping's keys into this one
			if err := sh.checkMerge(v, ks, path, unknown); err != nil {
				return err
			}
			continue
		}
		t, ok := ks.types[k.Value]
		if !ok {
			return unknown(k)
		}
		if first, dup := seen[k.Value]; dup {
			return &FieldError{Path: join(path, k.Value), Line: k.Line, Reason: fmt.Sprintf("written twice (also on line %d)", first)}
		}
		seen[k.Value] = k.Line
		if err := sh.checkNode(v, t, join(path, k.Value)); err != nil {
			return err
		}
	}
	return nil
}

func (sh *shape) checkMerge(v *yaml.Node, ks sectionKeys, path string, unknown func(k *yaml.Node) error) error {
	v = resolveAlias(v)
	switch v.Kind {
	case yaml.SequenceNode:
		for _, e := range v.Content {
			if err := sh.checkMerge(e, ks, path, unknown); err != nil {
				return err
			}
		}
		return nil
	case yaml.MappingNode:
		return sh.checkMapping(v, ks, path, unknown)
	}
	if isNull(v) {
		return nil
	}
	return wrongKind(v, reflect.TypeOf(struct{}{}), path)
}

// lookup is the value of key in mapping m, following aliases and merge keys as the decoder
// does (a key of m itself wins over a merged one); nil when m has none.
func lookup(m *yaml.Node, key string) *yaml.Node {
	m = resolveAlias(m)
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	var merged []*yaml.Node
	for i := 0; i+1 < len(m.Content); i += 2 {
		switch k := m.Content[i]; {
		case k.Tag == "!!merge":
			merged = append(merged, m.Content[i+1])
		case k.Value == key:
			return resolveAlias(m.Content[i+1])
		}
	}
	for _, v := range merged {
		list := []*yaml.Node{resolveAlias(v)}
		if list[0].Kind == yaml.SequenceNode {
			list = list[0].Content
		}
		for _, e := range list {
			if n := lookup(e, key); n != nil {
				return n
			}
		}
	}
	return nil
}

func resolveAlias(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// unknownKey reports a key the section does not take: with the nearest valid key, else the
// one section elsewhere that has it, else what the section (named where) takes.
func (sh *shape) unknownKey(k *yaml.Node, path string, keys []string, where string) error {
	e := &FieldError{Path: join(path, k.Value), Line: k.Line, Reason: "unknown key"}
	if near := Nearest(k.Value, keys); near != "" {
		e.Reason += "; did you mean " + join(path, near) + "?"
	} else if elsewhere := sh.keyElsewhere(k.Value, path); elsewhere != "" {
		e.Reason += "; did you mean " + elsewhere + "?"
	} else {
		if path == "" {
			where = "a pipeline file"
		}
		e.Reason += fmt.Sprintf(" (%s takes %s)", where, strings.Join(keys, ", "))
	}
	return e
}

// keyElsewhere finds a key written at the wrong level: the path of the one section, other than
// where it was written, that has a key of this name (a component section's types' keys
// included: dsn is sinks[].dsn).
func (sh *shape) keyElsewhere(key, written string) string {
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
		names := map[string]reflect.Type{}
		maps.Copy(names, keysOf(t).types)
		if c, ok := sh.sections[t]; ok {
			for _, st := range c.settings {
				maps.Copy(names, keysOf(st).types)
			}
		}
		for name, ft := range names {
			p := join(path, name)
			if strings.EqualFold(name, key) && path != written && !slices.Contains(found, p) {
				found = append(found, p)
			}
			walk(ft, p, depth+1)
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
	case reflect.TypeOf(Duration{}), durationType:
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

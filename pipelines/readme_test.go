package pipelines

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/reignpipe/reignpipe/pipelines/components"
	"github.com/reignpipe/reignpipe/pipelines/registry"
)

// configKeys lists every key a pipeline file can set: "a.b" for a value, "a" for a group of
// keys (a struct), "sinks[].type" inside a list of structs.
func configKeys(t reflect.Type, prefix string, leaves, groups map[string]bool) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name := strings.Split(f.Tag.Get("yaml"), ",")[0]
		if !f.IsExported() || name == "" || name == "-" {
			continue
		}
		key := prefix + name
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case ft == reflect.TypeOf(Duration{}):
			leaves[key] = true
		case ft.Kind() == reflect.Struct:
			groups[key] = true
			configKeys(ft, key+".", leaves, groups)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			groups[key] = true
			configKeys(ft.Elem(), key+"[].", leaves, groups)
		default:
			leaves[key] = true
		}
	}
}

// readmeRow is one row of the README's configuration table: its keys (the first column), its
// default cell and the whole row as written.
type readmeRow struct {
	keys      []string
	def, text string
}

// readmeRows reads the README's configuration table. The first column holds `a.b`, `a.b`, `.c`
// (a sibling of the key before it) and `sinks[].type: kafka` (a key with a value).
func readmeRows(t *testing.T) []readmeRow {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	start := strings.Index(text, "## Configuration keys")
	if start < 0 {
		t.Fatal("README has no Configuration keys section")
	}
	text = text[start:]
	if end := strings.Index(text[3:], "\n## "); end >= 0 {
		text = text[:end+3]
	}
	tick := regexp.MustCompile("`([^`]+)`")
	var rows []readmeRow
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(line, "|")
		r := readmeRow{def: strings.TrimSpace(cells[2]), text: line}
		parent := ""
		for _, m := range tick.FindAllStringSubmatch(cells[1], -1) {
			k := strings.TrimSpace(strings.SplitN(m[1], ":", 2)[0])
			if strings.HasPrefix(k, ".") {
				k = parent + k
			}
			if i := strings.LastIndex(k, "."); i >= 0 {
				parent = k[:i]
			}
			r.keys = append(r.keys, k)
		}
		rows = append(rows, r)
	}
	return rows
}

// readmeKeys is the set of keys the README's configuration table documents.
func readmeKeys(t *testing.T) map[string]bool {
	keys := map[string]bool{}
	for _, r := range readmeRows(t) {
		for _, k := range r.keys {
			keys[k] = true
		}
	}
	return keys
}

// The README's key table and the loader agree: every key the loader reads is documented (by
// itself or by the group it belongs to), and every documented key is one the loader reads.
func TestREADMEConfigKeys(t *testing.T) {
	leaves, groups := map[string]bool{}, map[string]bool{}
	configKeys(reflect.TypeOf(Config{}), "", leaves, groups)
	// The component sections' type keys, from the settings each type declares.
	reg := components.Builtin()
	for _, s := range reg.Sources {
		for _, k := range s.Keys() {
			leaves["source."+k.Name] = true
		}
	}
	for _, s := range reg.Sinks {
		for _, k := range s.Keys() {
			leaves["sinks[]."+k.Name] = true
		}
	}
	for _, a := range reg.Aggregators {
		for _, k := range a.Keys() {
			leaves["aggregate."+k.Name] = true
		}
	}
	documented := readmeKeys(t)
	if len(documented) < 20 {
		t.Fatalf("read only %d keys from the README table", len(documented))
	}
	for k := range documented {
		if !leaves[k] && !groups[k] {
			t.Errorf("README documents %q, which the loader does not read", k)
		}
	}
	for k := range leaves {
		covered := documented[k]
		for p := k; !covered && strings.Contains(p, "."); {
			p = p[:strings.LastIndex(p, ".")]
			covered = documented[p] || documented[strings.TrimSuffix(p, "[]")]
		}
		if !covered {
			t.Errorf("the loader reads %q, which the README's key table does not document", k)
		}
	}
}

// The README's key table and the component registry agree: every registered type is named in
// its section's type row, every key a component declares (a field of its settings struct) is
// documented with the default its tag gives, and every key of a component section's common
// struct is declared by the registry, so none is read without a doc.
func TestREADMEComponents(t *testing.T) {
	reg := components.Builtin()
	if err := reg.Validate(); err != nil {
		t.Fatal(err)
	}
	rows := readmeRows(t)
	defaults := map[string]string{} // key -> the README's default for it
	typeRows := map[string]string{} // source.type, ... -> the rows documenting it
	for _, r := range rows {
		parts := strings.Split(r.def, ", ")
		for i, k := range r.keys {
			d := r.def
			if len(parts) == len(r.keys) {
				d = parts[i]
			}
			defaults[k] = strings.Trim(d, "`")
			if strings.HasSuffix(k, ".type") {
				typeRows[k] += r.text
			}
		}
	}
	type role struct {
		section string
		types   []string
		keys    map[string][]registry.Key // type -> keys ("" = every type's)
		config  reflect.Type
	}
	roles := []role{
		{section: "source", keys: map[string][]registry.Key{"": reg.SourceKeys()}, config: reflect.TypeOf(SourceConfig{})},
		{section: "sinks[]", keys: map[string][]registry.Key{}, config: reflect.TypeOf(SinkConfig{})},
		{section: "aggregate", keys: map[string][]registry.Key{}, config: reflect.TypeOf(AggregateConfig{})},
	}
	for _, s := range reg.Sources {
		roles[0].types, roles[0].keys[s.Type] = append(roles[0].types, s.Type), s.Keys()
	}
	for _, s := range reg.Sinks {
		roles[1].types, roles[1].keys[s.Type] = append(roles[1].types, s.Type), s.Keys()
	}
	for _, a := range reg.Aggregators {
		roles[2].types, roles[2].keys[a.Type] = append(roles[2].types, a.Type), a.Keys()
	}
	for _, ro := range roles {
		typeKey := ro.section + ".type"
		for _, typ := range ro.types {
			if !strings.Contains(typeRows[typeKey], "`"+typ+"`") && !strings.Contains(typeRows[typeKey], ": "+typ+"`") {
				t.Errorf("the README's %s rows do not name the registered type %q", typeKey, typ)
			}
		}
		declared := map[string]bool{"type": true}
		for typ, keys := range ro.keys {
			for _, k := range keys {
				declared[k.Name] = true
				full := ro.section + "." + k.Name
				if got, ok := defaults[full]; !ok {
					t.Errorf("%s (%s) is not in the README's key table", full, typ)
				} else if got != k.Default {
					t.Errorf("%s: the README's default is %q, the registry's %q", full, got, k.Default)
				}
			}
		}
		for i := 0; i < ro.config.NumField(); i++ {
			name := strings.Split(ro.config.Field(i).Tag.Get("yaml"), ",")[0]
			if name != "-" && !declared[name] {
				t.Errorf("%s.%s is read by the loader but declared by no component", ro.section, name)
			}
		}
	}
}

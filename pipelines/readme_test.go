package pipelines

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
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

// readmeKeys reads the first column of the README's configuration table: `a.b`, `a.b`, `.c`
// (a sibling of the key before it) and `sinks[].type: kafka` (a key with a value).
func readmeKeys(t *testing.T) map[string]bool {
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
	keys := map[string]bool{}
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first := strings.Split(line, "|")[1]
		parent := ""
		for _, m := range tick.FindAllStringSubmatch(first, -1) {
			k := strings.TrimSpace(strings.SplitN(m[1], ":", 2)[0])
			if strings.HasPrefix(k, ".") {
				k = parent + k
			}
			if i := strings.LastIndex(k, "."); i >= 0 {
				parent = k[:i]
			}
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

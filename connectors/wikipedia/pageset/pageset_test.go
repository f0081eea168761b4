package pageset

import (
	"bytes"
	"cmp"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func readSet(t *testing.T, path string) (string, []Page) {
	t.Helper()
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out []Page
	for {
		p, ok, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return r.Label(), out
		}
		out = append(out, p)
	}
}

func writeSet(t *testing.T, path, label string, pages ...Page) {
	t.Helper()
	if _, err := Write(path, label, (&slice{pages: pages}).Next); err != nil {
		t.Fatal(err)
	}
}

// want is the set of pages: sorted by id, each once at its highest revision.
func want(pages []Page) []Page {
	best := map[uint64]uint64{}
	for _, p := range pages {
		best[p.ID] = max(best[p.ID], p.Rev)
	}
	var out []Page
	for id, rev := range best {
		out = append(out, Page{id, rev})
	}
	slices.SortFunc(out, func(a, b Page) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// The builder gives the same set whatever the order of its pages and however often it
// spills, and leaves no run behind.
func TestBuilder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var shuffled []Page
	for i := range 1000 {
		shuffled = append(shuffled, Page{ID: uint64(rng.IntN(700)) * 2, Rev: uint64(i)})
	}
	ascending := want(shuffled)
	for _, tc := range []struct {
		name  string
		pages []Page
		max   int
	}{
		{"shuffled, no spill", shuffled, 1 << 20},
		{"shuffled, spilling every 7", shuffled, 7},
		{"shuffled, spilling every page", shuffled[:50], 1},
		{"ascending, spilling every 64", ascending, 64},
		{"empty", nil, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "set")
			b := NewBuilder(path, tc.max)
			for _, p := range tc.pages {
				if err := b.Add(p); err != nil {
					t.Fatal(err)
				}
			}
			n, err := b.Finish("testwiki")
			if err != nil {
				t.Fatal(err)
			}
			label, got := readSet(t, path)
			if w := want(tc.pages); !reflect.DeepEqual(got, w) || n != int64(len(w)) || label != "testwiki" {
				t.Fatalf("got %d pages (%d said) labelled %q, want %d", len(got), n, label, len(w))
			}
			entries, _ := os.ReadDir(dir)
			if len(entries) != 1 {
				t.Fatalf("left behind: %v", entries)
			}
		})
	}
}

func TestDiffAndUnion(t *testing.T) {
	dir := t.TempDir()
	p := func(name string) string { return filepath.Join(dir, name) }
	writeSet(t, p("old"), "w", Page{1, 10}, Page{2, 20}, Page{4, 40}, Page{7, 70}, Page{9, 0})
	writeSet(t, p("new"), "w", Page{2, 21}, Page{3, 30}, Page{7, 71})
	writeSet(t, p("empty"), "w")
	for _, tc := range []struct {
		old, new string
		want     []Page
	}{
		{"old", "new", []Page{{1, 10}, {4, 40}, {9, 0}}},
		{"new", "old", []Page{{3, 30}}},
		{"old", "empty", []Page{{1, 10}, {2, 20}, {4, 40}, {7, 70}, {9, 0}}},
		{"empty", "old", nil},
		{"old", "old", nil},
	} {
		d, err := NewDiff(p(tc.old), p(tc.new))
		if err != nil {
			t.Fatal(err)
		}
		var got []Page
		for {
			pg, ok, err := d.Next()
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			got = append(got, pg)
		}
		d.Close()
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s - %s = %v, want %v", tc.old, tc.new, got, tc.want)
		}
	}

	// Into one of its inputs, leaving out one that does not exist.
	if _, err := Union(p("old"), "w", p("old"), p("missing"), p("new")); err != nil {
		t.Fatal(err)
	}
	_, got := readSet(t, p("old"))
	if w := []Page{{1, 10}, {2, 21}, {3, 30}, {4, 40}, {7, 71}, {9, 0}}; !reflect.DeepEqual(got, w) {
		t.Errorf("union %v, want %v", got, w)
	}
}

func TestRemoveSpills(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "p[1].articles")
	for _, name := range []string{"p[1].articles", "p[1].articles.spill-0", "p[1].articles.spill-12", "p[1].articles.next", "other.spill-0"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := RemoveSpills(path); err != nil {
		t.Fatal(err)
	}
	var left []string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if got := strings.Join(left, " "); got != "other.spill-0 p[1].articles p[1].articles.next" {
		t.Errorf("left %s", got)
	}
}

func TestCorruptFiles(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	writeSet(t, good, "w", Page{1, 1}, Page{5, 5})
	data, _ := os.ReadFile(good)
	swapped := bytes.Clone(data)
	body := len(data) - 2*recordLen
	copy(swapped[body:], data[body+recordLen:])
	copy(swapped[body+recordLen:], data[body:body+recordLen])
	for _, tc := range []struct {
		name, data, want string
	}{
		{"not a set", "hello world, this is text", "not a page set"},
		{"cut short", string(data[:len(data)-3]), "not a multiple"},
		{"out of order", string(swapped), "page 1 after 5"},
	} {
		path := filepath.Join(dir, tc.name)
		os.WriteFile(path, []byte(tc.data), 0o644)
		err := func() error {
			r, err := Open(path)
			if err != nil {
				return err
			}
			defer r.Close()
			for {
				_, ok, err := r.Next()
				if err != nil || !ok {
					return err
				}
			}
		}()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// FuzzOpen: whatever a state file holds, reading it ends in pages or an error, never a panic,
// and what it yields ascends.
func FuzzOpen(f *testing.F) {
	dir := f.TempDir()
	good := filepath.Join(dir, "seed")
	if _, err := Write(good, "enwiki", (&slice{pages: []Page{{3, 9}, {8, 0}}}).Next); err != nil {
		f.Fatal(err)
	}
	seed, _ := os.ReadFile(good)
	f.Add(seed)
	f.Add([]byte(magic + "\x00\x00\x00\x00"))
	f.Add([]byte(magic + "\xff\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, data []byte) {
		// From memory, as Open reads a file: a temp file per input would make the fuzzing
		// mostly syscalls.
		r, err := newReader(bytes.NewReader(data), int64(len(data)), "set")
		if err != nil {
			return
		}
		var last uint64
		for i := 0; ; i++ {
			p, ok, err := r.Next()
			if err != nil || !ok {
				return
			}
			if i > 0 && p.ID <= last {
				t.Fatalf("yielded %d after %d", p.ID, last)
			}
			last = p.ID
		}
	})
}

func ExampleDiff() {
	dir, _ := os.MkdirTemp("", "pageset")
	defer os.RemoveAll(dir)
	last, now := filepath.Join(dir, "last"), filepath.Join(dir, "now")
	for path, pages := range map[string][]Page{last: {{12, 100}, {25, 200}, {39, 300}}, now: {{12, 101}, {39, 301}}} {
		b := NewBuilder(path, 1<<20)
		for _, p := range pages {
			b.Add(p)
		}
		b.Finish("enwiki")
	}
	d, _ := NewDiff(last, now)
	defer d.Close()
	for {
		p, ok, _ := d.Next()
		if !ok {
			break
		}
		fmt.Printf("page %d gone since revision %d\n", p.ID, p.Rev)
	}
	// Output: page 25 gone since revision 200
}

package uspto

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/connectors/uspto/patentxml"
	"github.com/reignpipe/reignpipe/internal/testenv"
)

var sharedID = regexp.MustCompile(`^uspto:US[0-9A-Z]+[A-Z][0-9]?$`)

type formatStats struct {
	docs, bad int
	skipped   map[string]int
	lengths   []int
}

// TestSharedFiles reads every real file through the Source and checks what a downstream
// stage relies on; it logs a per-format table (format = document type and DTD version).
func TestSharedFiles(t *testing.T) {
	dir := testenv.SharedData(t, "patents/uspto")
	var files []string
	for _, pat := range []string{"*.xml", "single/*.xml"} {
		m, _ := filepath.Glob(filepath.Join(dir, pat))
		files = append(files, m...)
	}
	if len(files) == 0 {
		t.Skip("no shared USPTO files")
	}
	formats := map[string]*formatStats{}
	get := func(f string) *formatStats {
		if formats[f] == nil {
			formats[f] = &formatStats{skipped: map[string]int{}}
		}
		return formats[f]
	}
	for _, path := range files {
		rel, _ := filepath.Rel(dir, path)
		r, err := Open(Options{Path: path})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for {
			d, _, err := r.Read(context.Background())
			if err == io.EOF {
				break
			}
			var bad *connectors.BadInputError
			if errors.As(err, &bad) {
				t.Errorf("%s: %v", rel, bad)
				get(rel).bad++
				continue
			}
			if err != nil {
				t.Fatalf("%s: %v", rel, err)
			}
			format := d.Meta["doc_type"] + " " + strings.Fields(d.Meta["dtd_version"] + " ?")[0]
			if strings.HasPrefix(d.Meta["kind"], "S") {
				format += " design"
			}
			fs := get(format)
			fs.docs++
			fs.lengths = append(fs.lengths, utf8.RuneCountInString(d.Text))
			if !sharedID.MatchString(d.ID) || seen[d.ID] {
				t.Errorf("%s: bad or repeated ID %q", rel, d.ID)
			}
			seen[d.ID] = true
			if d.Title == "" || d.Version == "" || !utf8.ValidString(d.Text) {
				t.Errorf("%s: %s: empty title or version, or invalid UTF-8", rel, d.ID)
			}
		}
		st := r.Stats()
		for k, v := range st.Skipped {
			get("skipped").skipped[k] += int(v)
		}
		if st.BytesRead != st.BytesTotal {
			t.Errorf("%s: read %d of %d bytes", rel, st.BytesRead, st.BytesTotal)
		}
		r.Close(context.Background())
		checkSections(t, path, rel)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-32s %5s %4s %8s %8s %8s\n", "format", "docs", "bad", "min", "median", "max")
	names := make([]string, 0, len(formats))
	for k := range formats {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		fs := formats[k]
		if k == "skipped" {
			fmt.Fprintf(&b, "skipped non-patents: %v\n", fs.skipped)
			continue
		}
		slices.Sort(fs.lengths)
		fmt.Fprintf(&b, "%-32s %5d %4d %8d %8d %8d\n", k, fs.docs, fs.bad,
			fs.lengths[0], fs.lengths[len(fs.lengths)/2], fs.lengths[len(fs.lengths)-1])
	}
	t.Log(b.String())
}

// checkSections parses the file directly to see the sections: utility grants must have an
// abstract and claims; design and plant grants (kind S, P) may lack an abstract.
func checkSections(t *testing.T, path, rel string) {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sp := NewSplitter(f, 0)
	unknown := 0
	for {
		data, off, err := sp.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p, err := patentxml.ParseDocument(data)
		if err != nil {
			continue // counted by the Source pass
		}
		unknown += p.UnknownEntities
		if p.DocType == patentxml.Grant && len(p.Claims) == 0 {
			t.Errorf("%s offset %d: %s has no claims", rel, off, p.DocID)
		}
		if p.DocType == patentxml.Grant && strings.HasPrefix(p.Kind, "B") && len(p.Abstract) == 0 {
			t.Errorf("%s offset %d: utility grant %s has no abstract", rel, off, p.DocID)
		}
	}
	if unknown > 0 {
		t.Logf("%s: %d unknown entity references dropped", rel, unknown)
	}
}

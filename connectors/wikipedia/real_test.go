package wikipedia

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/reignpipe/reignpipe/internal/testenv"
)

// Counts of the real files in ../shared/data/wikipedia (see its README). Pages are every
// <page>; the rest are what this reader does with them under the default Namespaces [0].
func TestRealFiles(t *testing.T) {
	tests := []struct {
		file                          string
		source                        string
		pages, docs, redirects, other int64
	}{
		{"enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2", "enwiki", 206, 106, 99, 1},
		{"enwiki-table-markup.xml.bz2", "enwiki", 5, 5, 0, 0},
		{"fatwiki-20240920-pages-articles-multistream.xml.bz2", "fatwiki", 3566, 1463, 19, 2081},
		{"bgwiki-latest-pages-articles-shortened-utf16.xml.bz2", "bgwiki", 3, 1, 0, 2},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			path := testenv.SharedData(t, "wikipedia/"+tc.file)
			res, st, err := readAll(t, Options{Path: path})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.bad) != 0 {
				t.Errorf("bad inputs: %v", res.bad)
			}
			total := st.Read + int64(len(res.bad))
			for _, n := range st.Skipped {
				total += n
			}
			if total != tc.pages || st.Read != tc.docs || st.Skipped["redirect"] != tc.redirects || st.Skipped["namespace"] != tc.other {
				t.Errorf("pages %d read %d skipped %v; want pages %d docs %d redirects %d other ns %d",
					total, st.Read, st.Skipped, tc.pages, tc.docs, tc.redirects, tc.other)
			}
			if st.BytesRead != st.BytesTotal {
				t.Errorf("bytes read %d of %d", st.BytesRead, st.BytesTotal)
			}
			chars := 0
			for _, d := range res.docs {
				chars += utf8.RuneCountInString(d.Text)
				if !strings.HasPrefix(d.ID, tc.source+":") || d.Source != tc.source || d.Version == "" {
					t.Fatalf("doc %+v", d.ID)
				}
				checkPlain(t, d.Title, d.Text)
			}
			t.Logf("%s: pages %d, articles %d, redirects %d, other namespaces %d, skipped %v, bad %d, text chars %d",
				tc.file, total, st.Read, st.Skipped["redirect"], st.Skipped["namespace"], st.Skipped, len(res.bad), chars)
			if len(res.docs) > 0 {
				d := res.docs[0]
				t.Logf("sample %s %q:\n%s", d.ID, d.Title, d.Text[:min(len(d.Text), 1200)])
			}
		})
	}
}

// checkPlain fails when wiki markup survives the conversion.
func checkPlain(t *testing.T, title, text string) {
	t.Helper()
	if !utf8.ValidString(text) {
		t.Errorf("%s: invalid UTF-8", title)
	}
	for _, m := range []string{"{{", "}}", "[[", "]]", "<ref", "{|", "<!--", "'''"} {
		if i := strings.Index(text, m); i >= 0 {
			t.Errorf("%s: %q survives: ...%s...", title, m, text[max(0, i-80):min(len(text), i+80)])
		}
	}
}

func TestRealMultistreamMatchesSequential(t *testing.T) {
	path := testenv.SharedData(t, "wikipedia/fatwiki-20240920-pages-articles-multistream.xml.bz2")
	seq, seqSt, err := readAll(t, Options{Path: path, Sequential: true})
	if err != nil {
		t.Fatal(err)
	}
	par, parSt, err := readAll(t, Options{Path: path, Workers: 4})
	if err != nil {
		t.Fatal(err)
	}
	if len(seq.docs) != len(par.docs) || fmt.Sprint(seqSt) != fmt.Sprint(parSt) {
		t.Fatalf("sequential %d docs %+v, parallel %d docs %+v", len(seq.docs), seqSt, len(par.docs), parSt)
	}
	for i := range seq.docs {
		if seq.docs[i].ID != par.docs[i].ID || seq.docs[i].Text != par.docs[i].Text {
			t.Fatalf("doc %d: %s vs %s", i, seq.docs[i].ID, par.docs[i].ID)
		}
	}
}

// BenchmarkRead reads the fatwiki multistream dump whole, reporting compressed MB/s and
// pages/s, sequentially (no index) and with the index at 1 and NumCPU workers.
func BenchmarkRead(b *testing.B) {
	path := testenv.SharedData(b, "wikipedia/fatwiki-20240920-pages-articles-multistream.xml.bz2")
	st, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	cases := []struct {
		name string
		opts Options
	}{
		{"sequential", Options{Path: path, Sequential: true}},
		{"workers=1", Options{Path: path, Workers: 1}},
		{fmt.Sprintf("workers=%d", runtime.NumCPU()), Options{Path: path, Workers: runtime.NumCPU()}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			var pages int64
			for b.Loop() {
				_, s, err := readAll(b, c.opts)
				if err != nil {
					b.Fatal(err)
				}
				pages = s.Read
				for _, n := range s.Skipped {
					pages += n
				}
			}
			sec := b.Elapsed().Seconds() / float64(b.N)
			b.ReportMetric(float64(st.Size())/1e6/sec, "MB/s")
			b.ReportMetric(float64(pages)/sec, "pages/s")
		})
	}
}

package uspto

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func splitAll(t testing.TB, in []byte, max int64) (docs []string, offs []int64, errs []error) {
	sp := NewSplitter(iotest.HalfReader(bytes.NewReader(in)), max)
	for {
		doc, off, err := sp.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			var tl *TooLargeError
			if !errors.As(err, &tl) {
				t.Fatalf("split: %v", err)
			}
			errs = append(errs, err)
			offs = append(offs, off)
			continue
		}
		docs = append(docs, string(doc))
		offs = append(offs, off)
	}
}

func TestSplit(t *testing.T) {
	d1 := "<?xml version=\"1.0\"?>\n<a>one</a>\n"
	d2 := "<?xml version=\"1.0\"?>\n<?xml-stylesheet href=\"x\"?><b>two</b>"
	tests := []struct {
		name string
		in   string
		want []string
		offs []int64
	}{
		{"two with trailing newline", d1 + d2 + "\n", []string{d1, d2 + "\n"}, []int64{0, int64(len(d1))}},
		{"two without trailing newline", d1 + d2, []string{d1, d2}, []int64{0, int64(len(d1))}},
		{"blank preamble dropped", "\n \n" + d1, []string{d1}, []int64{3}},
		{"no declaration at all", "<a>x</a>", []string{"<a>x</a>"}, []int64{0}},
		{"text preamble kept", "junk" + d1, []string{"junk", d1}, []int64{0, 4}},
		{"empty", "", nil, nil},
		{"truncated last", d1 + d2[:20], []string{d1, d2[:20]}, []int64{0, int64(len(d1))}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			docs, offs, _ := splitAll(t, []byte(tc.in), 0)
			if strings.Join(docs, "|") != strings.Join(tc.want, "|") || len(docs) != len(tc.want) {
				t.Errorf("docs %q want %q", docs, tc.want)
			}
			for i := range offs {
				if i < len(tc.offs) && offs[i] != tc.offs[i] {
					t.Errorf("offsets %v want %v", offs, tc.offs)
					break
				}
			}
		})
	}
}

func TestSplitTooLarge(t *testing.T) {
	small := "<?xml version=\"1.0\"?><a>1</a>"
	big := "<?xml version=\"1.0\"?><us-patent-grant><doc>" + strings.Repeat("x", 5000) + "</doc></us-patent-grant>"
	in := small + big + small
	docs, offs, errs := splitAll(t, []byte(in), 1000)
	if len(docs) != 2 || docs[0] != small || docs[1] != small {
		t.Fatalf("docs %q", docs)
	}
	if len(errs) != 1 {
		t.Fatalf("errs %v", errs)
	}
	var tl *TooLargeError
	errors.As(errs[0], &tl)
	if tl.Offset != int64(len(small)) || tl.Size != int64(len(big)) || offs[2] != int64(len(small)+len(big)) {
		t.Errorf("too large %+v, offsets %v", tl, offs)
	}
}

func FuzzSplit(f *testing.F) {
	f.Add([]byte("<?xml version=\"1.0\"?>\n<a/>\n<?xml version=\"1.0\"?><b/>"), int64(0))
	f.Add([]byte("x<?xml <?xml\t<?xml-y <?xm"), int64(7))
	f.Fuzz(func(t *testing.T, in []byte, max int64) {
		if max < 0 || max > 1<<20 {
			max = 0
		}
		docs, offs, errs := splitAll(t, in, max)
		if len(errs) > 0 { // documents were skipped: only check that offsets ascend
			for i := 1; i < len(offs); i++ {
				if offs[i] <= offs[i-1] {
					t.Fatalf("offsets %v", offs)
				}
			}
			return
		}
		want := in
		if i := nextDecl(in, 0); i >= 0 && len(bytes.TrimSpace(in[:i])) == 0 {
			want = in[i:]
		} else if i < 0 && len(bytes.TrimSpace(in)) == 0 {
			want = nil
		}
		if got := strings.Join(docs, ""); got != string(want) {
			t.Fatalf("concatenation %q, want %q", got, want)
		}
		for i, d := range docs {
			if int(offs[i]) > len(in) || !strings.HasPrefix(string(in[offs[i]:]), d) {
				t.Fatalf("doc %d at offset %d does not match the input", i, offs[i])
			}
		}
	})
}

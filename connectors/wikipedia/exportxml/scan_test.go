package exportxml

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestParsePage(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Page
		wantErr string
	}{
		{
			name: "full",
			in: `<page><title>A &amp; B</title><ns>0</ns><id>12</id><revision><id>99</id>` +
				`<timestamp>2020-01-01T00:00:00Z</timestamp><contributor><username>u</username><id>7</id></contributor>` +
				`<text bytes="5" xml:space="preserve">x &lt;b&gt; &#233;&#x41;</text></revision></page>`,
			want: Page{Title: "A & B", NS: "0", ID: "12", RevID: "99", Timestamp: "2020-01-01T00:00:00Z",
				Text: "x <b> éA", HasRevision: true, HasText: true},
		},
		{
			name: "redirect and self-closing text",
			in:   `<page><title>R</title><ns>0</ns><id>1</id><redirect title="T" /><revision><id>2</id><text bytes="0" /></revision></page>`,
			want: Page{Title: "R", NS: "0", ID: "1", RevID: "2", Redirect: true, HasRevision: true, HasText: true},
		},
		{
			name: "deleted text",
			in:   `<page><title>D</title><ns>0</ns><id>1</id><revision><id>2</id><text deleted="deleted" /></revision></page>`,
			want: Page{Title: "D", NS: "0", ID: "1", RevID: "2", HasRevision: true},
		},
		{
			name: "cdata and comment",
			in:   `<page><title>C</title><!-- c --><ns>0</ns><id>1</id><revision><id>2</id><text><![CDATA[a<b>&amp;]]></text></revision></page>`,
			want: Page{Title: "C", NS: "0", ID: "1", RevID: "2", Text: "a<b>&amp;", HasRevision: true, HasText: true},
		},
		{name: "mismatched", in: `<page><title>X</ns></page>`, wantErr: "unexpected </ns>"},
		{name: "unclosed", in: `<page><title>X</title><revision>`, wantErr: "unclosed <revision>"},
		{name: "bad tag", in: `<page><title>X</title><a <b></page>`, wantErr: "malformed tag"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParsePage([]byte(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func scanAll(in io.Reader) (kinds []int, elems []string, err error) {
	sc := NewScanner(in, 0)
	for {
		k, e, err := sc.Next()
		if err == io.EOF {
			return kinds, elems, nil
		}
		if err != nil {
			return kinds, elems, err
		}
		kinds = append(kinds, k)
		elems = append(elems, string(e))
	}
}

func TestScanner(t *testing.T) {
	tests := []struct {
		name      string
		in        string
		wantKinds []int
		wantErr   string
	}{
		{"pages and siteinfo", `<mediawiki><siteinfo><dbname>x</dbname></siteinfo><page>a</page> <page>b</page></mediawiki>`,
			[]int{ElemSiteinfo, ElemPage, ElemPage}, ""},
		{"fragment without root", `  <page>a</page>`, []int{ElemPage}, ""},
		{"look-alike tags ignored", `<pages><pagex>x</pagex><page id="1">a</page>`, []int{ElemPage}, ""},
		{"lost end tag resyncs", `<page>a<page>b</page><page>c</page>`, []int{ElemBadPage, ElemPage, ElemPage}, ""},
		{"truncated", `<page>a</page><page>b`, []int{ElemPage}, "ends inside a <page>"},
		{"empty", ``, nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// One byte at a time exercises every buffer boundary.
			kinds, _, err := scanAll(iotest.OneByteReader(strings.NewReader(tc.in)))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if len(kinds) != len(tc.wantKinds) {
				t.Fatalf("kinds = %v, want %v", kinds, tc.wantKinds)
			}
			for i := range kinds {
				if kinds[i] != tc.wantKinds[i] {
					t.Fatalf("kinds = %v, want %v", kinds, tc.wantKinds)
				}
			}
		})
	}
}

func TestScannerLargePage(t *testing.T) {
	text := strings.Repeat("word ", 1<<20) // several buffer growths
	in := "<page><title>T</title><ns>0</ns><id>1</id><revision><id>2</id><text>" + text + "</text></revision></page>"
	_, elems, err := scanAll(strings.NewReader(in))
	if err != nil || len(elems) != 1 {
		t.Fatalf("elems %d err %v", len(elems), err)
	}
	p, err := ParsePage([]byte(elems[0]))
	if err != nil || p.Text != text {
		t.Fatalf("text len %d err %v", len(p.Text), err)
	}
}

func TestUnescape(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain", "plain"},
		{"&lt;&gt;&amp;&quot;&apos;", `<>&"'`},
		{"&#65;&#x42;&#X43;", "ABC"},
		{"&#0;&#xD800;&#99999999999;", "\uFFFD\uFFFD&#99999999999;"},
		{"&unknown; & &amp", "&unknown; & &amp"},
		{"a\xffb", "a\uFFFDb"},
	}
	for _, tc := range tests {
		if got := Unescape([]byte(tc.in)); got != tc.want {
			t.Errorf("Unescape(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// Skipping a page keeps the scanner's buffer at its size: a 12 MB page under a 1 MiB bound
// never grows it past twice the first read.
func TestSkipPageHoldsNoMore(t *testing.T) {
	in := "<page><title>Big</title><id>7</id>" + strings.Repeat("x", 12<<20) + "</page><page><title>Next</title></page>"
	sc := NewScanner(strings.NewReader(in), 1<<20)
	kind, head, err := sc.Next()
	if err != nil || kind != ElemLargePage {
		t.Fatalf("first element: kind %d, %v", kind, err)
	}
	if title, id := PageHead(head); title != "Big" || id != "7" || sc.skippedBytes != int64(len(in)-len("<page><title>Next</title></page>")) {
		t.Errorf("head %q/%q, skipped %d", title, id, sc.skippedBytes)
	}
	if kind, elem, err := sc.Next(); err != nil || kind != ElemPage || string(elem) != "<page><title>Next</title></page>" {
		t.Errorf("second element: kind %d %q %v", kind, elem, err)
	}
	if len(sc.buf) > 2<<20 {
		t.Errorf("buffer grew to %d bytes", len(sc.buf))
	}
}

// Under a small page bound every page handed out is within it, and what is skipped is named
// from its head without panicking, whatever the input.
func FuzzScanBounded(f *testing.F) {
	f.Add([]byte(`<page><title>T</title><id>1</id>`+strings.Repeat("x", 200)+`</page><page><title>U</title></page>`), 64)
	f.Add([]byte(`<page><page></page>`), 8)
	f.Add([]byte(`<page>`+strings.Repeat("</pag", 50)), 16)
	f.Fuzz(func(t *testing.T, in []byte, max int) {
		if max < 0 {
			max = -max
		}
		sc := NewScanner(bytes.NewReader(in), max%4096)
		for range len(in) + 1 {
			kind, elem, err := sc.Next()
			if err != nil {
				return
			}
			switch kind {
			case ElemPage:
				if len(elem) > sc.maxPage {
					t.Fatalf("page of %d bytes handed out under a bound of %d", len(elem), sc.maxPage)
				}
			case ElemLargePage:
				_, _ = PageHead(elem)
				if sc.skippedBytes <= int64(sc.maxPage) || len(elem) > HeadBytes {
					t.Fatalf("skipped %d bytes under a bound of %d, head %d", sc.skippedBytes, sc.maxPage, len(elem))
				}
			}
		}
		t.Fatal("the scanner did not end")
	})
}

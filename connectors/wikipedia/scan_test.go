package wikipedia

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"unicode/utf8"

	"github.com/reignpipe/reignpipe/connectors/textpolicy"
	"github.com/reignpipe/reignpipe/connectors/wikipedia/wikitext"
)

func TestParsePage(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    page
		wantErr string
	}{
		{
			name: "full",
			in: `<page><title>A &amp; B</title><ns>0</ns><id>12</id><revision><id>99</id>` +
				`<timestamp>2020-01-01T00:00:00Z</timestamp><contributor><username>u</username><id>7</id></contributor>` +
				`<text bytes="5" xml:space="preserve">x &lt;b&gt; &#233;&#x41;</text></revision></page>`,
			want: page{title: "A & B", ns: "0", id: "12", revID: "99", timestamp: "2020-01-01T00:00:00Z",
				text: "x <b> éA", hasRevision: true, hasText: true},
		},
		{
			name: "redirect and self-closing text",
			in:   `<page><title>R</title><ns>0</ns><id>1</id><redirect title="T" /><revision><id>2</id><text bytes="0" /></revision></page>`,
			want: page{title: "R", ns: "0", id: "1", revID: "2", redirect: true, hasRevision: true, hasText: true},
		},
		{
			name: "deleted text",
			in:   `<page><title>D</title><ns>0</ns><id>1</id><revision><id>2</id><text deleted="deleted" /></revision></page>`,
			want: page{title: "D", ns: "0", id: "1", revID: "2", hasRevision: true},
		},
		{
			name: "cdata and comment",
			in:   `<page><title>C</title><!-- c --><ns>0</ns><id>1</id><revision><id>2</id><text><![CDATA[a<b>&amp;]]></text></revision></page>`,
			want: page{title: "C", ns: "0", id: "1", revID: "2", text: "a<b>&amp;", hasRevision: true, hasText: true},
		},
		{name: "mismatched", in: `<page><title>X</ns></page>`, wantErr: "unexpected </ns>"},
		{name: "unclosed", in: `<page><title>X</title><revision>`, wantErr: "unclosed <revision>"},
		{name: "bad tag", in: `<page><title>X</title><a <b></page>`, wantErr: "malformed tag"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parsePage([]byte(tc.in))
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
	sc := newScanner(in, 0)
	for {
		k, e, err := sc.next()
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
			[]int{elemSiteinfo, elemPage, elemPage}, ""},
		{"fragment without root", `  <page>a</page>`, []int{elemPage}, ""},
		{"look-alike tags ignored", `<pages><pagex>x</pagex><page id="1">a</page>`, []int{elemPage}, ""},
		{"lost end tag resyncs", `<page>a<page>b</page><page>c</page>`, []int{elemBadPage, elemPage, elemPage}, ""},
		{"truncated", `<page>a</page><page>b`, []int{elemPage}, "ends inside a <page>"},
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
	p, err := parsePage([]byte(elems[0]))
	if err != nil || p.text != text {
		t.Fatalf("text len %d err %v", len(p.text), err)
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
		if got := unescape([]byte(tc.in)); got != tc.want {
			t.Errorf("unescape(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestSniffEncoding(t *testing.T) {
	tests := []struct {
		in   []byte
		enc  textEncoding
		skip int
	}{
		{[]byte("<med"), encUTF8, 0},
		{[]byte("\xEF\xBB\xBF<"), encUTF8, 3},
		{[]byte("\xFF\xFE<\x00"), encUTF16LE, 2},
		{[]byte("\xFE\xFF\x00<"), encUTF16BE, 2},
		{[]byte("<\x00m\x00"), encUTF16LE, 0},
		{[]byte("\x00<\x00m"), encUTF16BE, 0},
		{nil, encUTF8, 0},
	}
	for _, tc := range tests {
		enc, skip := sniffEncoding(tc.in)
		if enc != tc.enc || skip != tc.skip {
			t.Errorf("sniffEncoding(%q) = %v,%d want %v,%d", tc.in, enc, skip, tc.enc, tc.skip)
		}
	}
}

func FuzzScanPages(f *testing.F) {
	f.Add([]byte(`<mediawiki><siteinfo><dbname>x</dbname></siteinfo><page><title>T</title><ns>0</ns><id>1</id><revision><id>2</id><text>{{a}} b</text></revision></page></mediawiki>`))
	f.Add([]byte(`<page><page></page>`))
	f.Add([]byte(`<page><title a='>'>x</title><![CDATA[</page>`))
	f.Fuzz(func(t *testing.T, in []byte) {
		_, elems, _ := scanAll(bytes.NewReader(in))
		r := &Reader{names: wikitext.DefaultNamespaces(), namespaces: map[int]bool{0: true}}
		for _, e := range elems {
			// Parsed fields hold the bytes as found; what leaves the reader is valid text.
			it, _ := r.convert([]byte(e), textpolicy.Counts{})
			if !utf8.ValidString(it.doc.Text) || !utf8.ValidString(it.title) {
				t.Fatalf("invalid UTF-8 from %q", e)
			}
			_ = dbname([]byte(e))
		}
	})
}

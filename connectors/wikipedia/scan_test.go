package wikipedia

import (
	"bytes"
	"testing"
	"unicode/utf8"

	"github.com/reignpipe/reignpipe/connectors/textpolicy"
	"github.com/reignpipe/reignpipe/connectors/wikipedia/exportxml"
	"github.com/reignpipe/reignpipe/connectors/wikipedia/wikitext"
)

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
		var elems [][]byte
		sc := exportxml.NewScanner(bytes.NewReader(in), 0)
		for {
			_, e, err := sc.Next()
			if err != nil {
				break
			}
			elems = append(elems, append([]byte(nil), e...))
		}
		r := &Reader{names: wikitext.DefaultNamespaces(), namespaces: map[int]bool{0: true}}
		for _, e := range elems {
			// Parsed fields hold the bytes as found; what leaves the reader is valid text.
			it, _ := r.convert(e, textpolicy.Counts{})
			if !utf8.ValidString(it.doc.Text) || !utf8.ValidString(it.title) {
				t.Fatalf("invalid UTF-8 from %q", e)
			}
			_ = exportxml.DBName(e)
		}
	})
}

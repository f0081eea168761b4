// Package wikitest writes MediaWiki export dumps for tests: pages, bz2 streams, a multistream
// dump with its index laid out as Wikimedia lays them out, and a stream damaged in place. The
// wikipedia reader's tests and the runner's tests of a Wikipedia pipeline write their fixtures
// with it.
package wikitest

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsnet/compress/bzip2"

	"github.com/reignpipe/reignpipe/connectors/wikipedia/exportxml"
	"github.com/reignpipe/reignpipe/connectors/wikipedia/multistream"
)

// Footer closes a dump.
const Footer = "</mediawiki>\n"

// Siteinfo opens a dump of the wiki dbname.
func Siteinfo(dbname string) string {
	return fmt.Sprintf(`<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.11/" version="0.11">
  <siteinfo>
    <sitename>Wikipedia</sitename>
    <dbname>%s</dbname>
  </siteinfo>
`, dbname)
}

// Page is a <page> at revision rev; redirect adds the <redirect> element.
func Page(id, ns, rev int, title, text string, redirect bool) string {
	red := ""
	if redirect {
		red = `<redirect title="Elsewhere" />`
	}
	return fmt.Sprintf(`  <page>
    <title>%s</title>
    <ns>%d</ns>
    <id>%d</id>
    %s
    <revision>
      <id>%d</id>
      <timestamp>2024-01-0%dT00:00:00Z</timestamp>
      <contributor><username>u</username><id>5</id></contributor>
      <text bytes="%d" xml:space="preserve">%s</text>
    </revision>
  </page>
`, title, ns, id, red, rev, id%9+1, len(text), text)
}

// BZ2 is data as one bz2 stream.
func BZ2(t testing.TB, data string) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := bzip2.NewWriter(&buf, &bzip2.WriterConfig{Level: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(w, data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// WriteFile writes data as dir/name and returns the path.
func WriteFile(t testing.TB, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// WriteMultistream writes <name>-multistream.xml.bz2 (a stream holding head, perStream pages
// per stream, a footer stream) and its bz2 index. The index names each page by its own id and
// title, or, for a page without an id, as id 100+i and title "Title i: with colon" (i its
// place in pages).
func WriteMultistream(t testing.TB, dir, name, head string, pages []string, perStream int) (dump, index string) {
	t.Helper()
	var file, idx bytes.Buffer
	file.Write(BZ2(t, head))
	for i := 0; i < len(pages); i += perStream {
		off := file.Len()
		end := min(i+perStream, len(pages))
		for j := i; j < end; j++ {
			title, id := exportxml.PageHead([]byte(pages[j]))
			if id == "" {
				title, id = fmt.Sprintf("Title %d: with colon", j), fmt.Sprint(100+j)
			}
			fmt.Fprintf(&idx, "%d:%s:%s\n", off, id, title)
		}
		file.Write(BZ2(t, strings.Join(pages[i:end], "")))
	}
	file.Write(BZ2(t, Footer))
	dump = WriteFile(t, dir, name+"-multistream.xml.bz2", file.Bytes())
	index = WriteFile(t, dir, name+"-multistream-index.txt.bz2", BZ2(t, idx.String()))
	return dump, index
}

// Damage overwrites 8 bytes in the middle of the k-th page stream (0-based) of a multistream
// dump and returns that stream's byte range.
func Damage(t testing.TB, dump, index string, k int) (off, end int64) {
	t.Helper()
	offs, err := multistream.ReadIndex(index)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(dump)
	if err != nil {
		t.Fatal(err)
	}
	off, end = offs[k], int64(len(b))
	if k+1 < len(offs) {
		end = offs[k+1]
	}
	mid := off + (end-off)/2
	for i := mid; i < mid+8; i++ {
		b[i] ^= 0xA5
	}
	if err := os.WriteFile(dump, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return off, end
}

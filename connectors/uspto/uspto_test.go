package uspto

import (
	"archive/zip"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/schemas"
)

func grant(num, kind, date string) string {
	return `<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE us-patent-grant SYSTEM "us-patent-grant-v42-2006-08-23.dtd" [ ]>
<us-patent-grant lang="EN" dtd-version="v4.2 2006-08-23">
<us-bibliographic-data-grant>
<publication-reference><document-id><country>US</country><doc-number>` + num + `</doc-number><kind>` + kind + `</kind><date>` + date + `</date></document-id></publication-reference>
<application-reference><document-id><country>US</country><doc-number>10123456</doc-number><date>20040102</date></document-id></application-reference>
<classification-ipc><main-classification>A45F  504</main-classification></classification-ipc>
<invention-title>Title ` + num + `</invention-title>
</us-bibliographic-data-grant>
<abstract><p>Abstract ` + num + `.</p></abstract>
<description><heading>FIELD</heading><p>Desc one.</p><p>Desc two.</p></description>
<claims><claim><claim-text>1. A thing.</claim-text></claim></claims>
</us-patent-grant>
`
}

const sequence = `<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE sequence-cwu SYSTEM "us-sequence-listing-2004-03-09.dtd" [ ]>
<sequence-cwu><s100>ACGT</s100></sequence-cwu>
`

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

type result struct {
	docs []schemas.Document
	bad  []*connectors.BadInputError
}

func readAll(t *testing.T, opts Options) (result, connectors.SourceStats) {
	t.Helper()
	r, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	var res result
	for {
		d, ack, err := r.Read(context.Background())
		if err == io.EOF {
			break
		}
		var bad *connectors.BadInputError
		if errors.As(err, &bad) {
			res.bad = append(res.bad, bad)
		} else if err != nil {
			t.Fatal(err)
		} else {
			res.docs = append(res.docs, d)
		}
		if ack == nil {
			t.Fatal("nil ack")
		}
		if err := ack(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
	}
	return res, r.Stats()
}

func TestReadFile(t *testing.T) {
	g1, g2 := grant("07272630", "B2", "20070925"), grant("D584295", "S1", "20090106")
	broken := grant("07000001", "B1", "20060101")
	broken = broken[:len(broken)/2]
	content := g1 + sequence + broken + `<?xml version="1.0"?><foo/>` + "\n" + g2
	path := writeFile(t, "ipg070925.xml", content)
	res, st := readAll(t, Options{Path: path})
	if len(res.docs) != 2 || len(res.bad) != 1 {
		t.Fatalf("docs %d bad %d", len(res.docs), len(res.bad))
	}
	d := res.docs[0]
	want := schemas.Document{
		ID: "uspto:US07272630B2", Source: "uspto", Version: "20070925B2", Title: "Title 07272630",
		Text: "Title 07272630\n\nAbstract 07272630.\n\n1. A thing.\n\nFIELD\nDesc one.\nDesc two.",
		Meta: map[string]string{
			"kind": "B2", "country": "US", "doc_number": "07272630", "publication_date": "20070925",
			"application_number": "10123456", "filing_date": "20040102", "cpc": "", "ipc": "A45F 504",
			"dtd_version": "v4.2 2006-08-23", "doc_type": "grant", "file": "ipg070925.xml", "offset": "0",
		},
	}
	if !reflect.DeepEqual(d, want) {
		t.Errorf("got  %#v\nwant %#v", d, want)
	}
	if res.docs[1].ID != "uspto:USD0584295S1" {
		t.Errorf("second ID %q", res.docs[1].ID)
	}
	bad := res.bad[0]
	wantPos := "ipg070925.xml offset " + strconv.Itoa(len(g1)+len(sequence))
	if bad.DocID != "uspto:US07000001B1" || bad.Position != wantPos || !strings.Contains(bad.Error(), "truncated") {
		t.Errorf("bad input %v (position %q, want %q)", bad, bad.Position, wantPos)
	}
	wantSkipped := map[string]int64{"sequence-listing": 1, "not-patent:foo": 1}
	if st.Read != 2 || !reflect.DeepEqual(st.Skipped, wantSkipped) || st.BytesRead != int64(len(content)) || st.BytesTotal != int64(len(content)) {
		t.Errorf("stats %+v", st)
	}
}

func TestSections(t *testing.T) {
	path := writeFile(t, "g.xml", grant("07272630", "B2", "20070925"))
	tests := []struct {
		sections []string
		want     string
	}{
		{[]string{"claims"}, "1. A thing."},
		{[]string{"description", "title"}, "FIELD\nDesc one.\nDesc two.\n\nTitle 07272630"},
		{[]string{"abstract", "claims"}, "Abstract 07272630.\n\n1. A thing."},
	}
	for _, tc := range tests {
		res, _ := readAll(t, Options{Path: path, Sections: tc.sections})
		if len(res.docs) != 1 || res.docs[0].Text != tc.want {
			t.Errorf("sections %v: %+v, want text %q", tc.sections, res.docs, tc.want)
		}
	}
	for _, bad := range [][]string{{}, {"claims", "claims"}, {"drawings"}} {
		if _, err := Open(Options{Path: path, Sections: bad}); err == nil {
			t.Errorf("sections %q accepted", bad)
		}
	}
	if _, err := Open(Options{}); err == nil {
		t.Error("empty Path accepted")
	}
	if _, err := Open(Options{Path: path, MaxDocBytes: -1}); err == nil {
		t.Error("negative MaxDocBytes accepted")
	}
}

func TestTooLargeIsBadInput(t *testing.T) {
	big := grant("07272630", "B2", "20070925")
	big = strings.Replace(big, "Desc one.", strings.Repeat("long text ", 300), 1)
	small := grant("07272631", "B2", "20070925")
	path := writeFile(t, "g.xml", big+small)
	res, st := readAll(t, Options{Path: path, MaxDocBytes: 2000})
	if len(res.docs) != 1 || res.docs[0].ID != "uspto:US07272631B2" || len(res.bad) != 1 {
		t.Fatalf("docs %v bad %v", res.docs, res.bad)
	}
	if b := res.bad[0]; b.DocID != "uspto:US07272630B2" || b.Position != "g.xml offset 0" || !strings.Contains(b.Error(), "limit") {
		t.Errorf("bad input %v", b)
	}
	if st.Read != 1 || st.BytesRead != st.BytesTotal {
		t.Errorf("stats %+v", st)
	}
}

func TestZip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ipg070925.zip")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	zw := zip.NewWriter(f)
	// written out of order: members are read in name order
	for _, m := range []struct{ name, content string }{
		{"b.xml", grant("07000003", "B2", "20070925")},
		{"readme.txt", "not xml"},
		{"a.xml", grant("07000001", "B2", "20070925") + sequence + grant("07000002", "B2", "20070925")},
	} {
		w, err := zw.Create(m.name)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, m.content)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	res, st := readAll(t, Options{Path: path})
	var ids []string
	for _, d := range res.docs {
		ids = append(ids, d.ID+"@"+d.Meta["file"])
	}
	want := []string{"uspto:US07000001B2@ipg070925.zip:a.xml", "uspto:US07000002B2@ipg070925.zip:a.xml", "uspto:US07000003B2@ipg070925.zip:b.xml"}
	if !reflect.DeepEqual(ids, want) || len(res.bad) != 0 {
		t.Errorf("ids %v bad %v", ids, res.bad)
	}
	if st.Skipped["sequence-listing"] != 1 || st.BytesRead != st.BytesTotal || st.BytesTotal == 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestReadCancelledAndClosed(t *testing.T) {
	path := writeFile(t, "g.xml", grant("07272630", "B2", "20070925"))
	r, err := Open(Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := r.Read(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled read: %v", err)
	}
	r.Close(context.Background())
	if _, _, err := r.Read(context.Background()); err == nil || err == io.EOF {
		t.Errorf("read after close: %v", err)
	}
	if err := r.Close(context.Background()); err != nil {
		t.Errorf("second close: %v", err)
	}
}

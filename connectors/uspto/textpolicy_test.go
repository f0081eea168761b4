package uspto

import (
	"reflect"
	"strings"
	"testing"
)

// The text policy on patents: a NUL inside the title no longer cuts it, invalid UTF-8 is one
// U+FFFD per run (not per byte), a patent without a readable title is read and counted.
func TestTextPolicy(t *testing.T) {
	damaged := strings.Replace(grant("07000001", "B2", "20060101"), "Title 07000001", "Ti\x00tle one", 1)
	damaged = strings.Replace(damaged, "Abstract 07000001.", "Abstract \xff\xfe\xfd one.", 1)
	untitled := strings.Replace(grant("07000002", "B2", "20060101"), "<invention-title>Title 07000002</invention-title>", "<invention-title>\x00</invention-title>", 1)
	res, st := readAll(t, Options{Path: writeFile(t, "ipg.xml", damaged+untitled)})
	if len(res.bad) != 0 || len(res.docs) != 2 {
		t.Fatalf("docs %d bad %v", len(res.docs), res.bad)
	}
	d := res.docs[0]
	if d.Title != "Title one" || !strings.Contains(d.Text, "Abstract \uFFFD one.") || strings.Contains(d.Text, "\uFFFD\uFFFD") {
		t.Errorf("title %q text %q", d.Title, d.Text)
	}
	if res.docs[1].Title != "" {
		t.Errorf("untitled: title %q", res.docs[1].Title)
	}
	want := map[string]int64{"repaired_utf8": 1, "stripped_control": 2, "no_title": 1}
	if !reflect.DeepEqual(st.Text, want) {
		t.Errorf("text counts %v, want %v", st.Text, want)
	}
}

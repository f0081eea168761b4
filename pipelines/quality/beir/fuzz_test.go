package beir

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func FuzzParseQrelsLine(f *testing.F) {
	for _, s := range []string{"q1\td1\t1", "q\td\t2.0\r\n", "a\tb", "\t\t", "x\ty\t-0", "1\t2\t1e3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		q, d, s, err := ParseQrelsLine(line)
		if err != nil {
			return
		}
		if q == "" || d == "" || strings.Contains(q+d, "\t") {
			t.Fatalf("bad ids %q %q", q, d)
		}
		// Whatever parsed must survive a canonical round trip unchanged.
		q2, d2, s2, err := ParseQrelsLine(q + "\t" + d + "\t" + strconv.Itoa(s))
		if err != nil || q2 != q || d2 != d || s2 != s {
			t.Fatalf("round trip of %q: %q %q %d %v", line, q2, d2, s2, err)
		}
	})
}

func FuzzParseDocLine(f *testing.F) {
	for _, s := range []string{`{"_id":"a","title":"t","text":"x"}`, `{"_id":12}`, `{"_id":-1.5e3}`,
		`{"_id":null}`, `{"_id":[1]}`, `{"_id":"\u00e9"}`, `[]`, `{`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		d, err := parseDocLine(line)
		if err != nil {
			return
		}
		if d.ID == "" {
			t.Fatal("empty id accepted")
		}
		// Re-encoding with a string id must give back the same document.
		b, _ := json.Marshal(map[string]string{"_id": d.ID, "title": d.Title, "text": d.Text})
		d2, err := parseDocLine(b)
		if err != nil || d2 != d {
			t.Fatalf("round trip of %q: %+v %v", line, d2, err)
		}
	})
}

func FuzzEachLine(f *testing.F) {
	for _, s := range []string{"a\nb", "\r\n\r\n", "x\r\r\n y \n", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var got [][]byte
		if _, err := EachLine(bytes.NewReader(data), func(l []byte) error {
			got = append(got, bytes.Clone(l))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		// Reference: split on \n, strip trailing CR/LF, drop blank lines.
		var want [][]byte
		for _, p := range bytes.Split(data, []byte("\n")) {
			p = bytes.TrimRight(p, "\r\n")
			if len(bytes.TrimSpace(p)) > 0 {
				want = append(want, p)
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("got %q want %q", got, want)
		}
	})
}

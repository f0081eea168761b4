package multistream

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

func TestParseIndex(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []int64
		wantErr string
	}{
		{"basic", "568:2:MediaWiki:Foo\n568:7:B\n900:10:C:D\n", []int64{568, 900}, ""},
		{"no trailing newline, CRLF", "5:1:a\r\n9:2:b", []int64{5, 9}, ""},
		{"unsorted", "9:1:a\n5:2:b\n9:3:c\n", []int64{5, 9}, ""},
		{"empty title", "5:1:\n", []int64{5}, ""},
		{"blank lines", "\n5:1:a\n\n", []int64{5}, ""},
		{"bad offset", "x:1:a\n", nil, "bad offset"},
		{"bad id", "5:x:a\n", nil, "bad page id"},
		{"missing field", "5\n", nil, "want offset"},
		{"beyond file (truncated dump)", "5:1:a\n5000:2:b\n", []int64{5, 5000}, ""},
		{"empty", "", nil, "no entries"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseIndex(strings.NewReader(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("got %v, want %v", got, tc.want)
				}
			}
		})
	}
}

func FuzzParseIndex(f *testing.F) {
	f.Add("568:2:MediaWiki:Foo\n568:7:B\n900:10:C\n")
	f.Add("9:1:a\r\n5:2:b")
	f.Fuzz(func(t *testing.T, in string) {
		offs, err := ParseIndex(strings.NewReader(in))
		if err != nil {
			return
		}
		for i := 1; i < len(offs); i++ {
			if offs[i] <= offs[i-1] {
				t.Fatalf("offsets not strictly increasing: %v", offs)
			}
		}
		if offs[0] < 0 {
			t.Fatalf("negative offset: %v", offs)
		}
	})
}

func TestStreamHeaderSearch(t *testing.T) {
	hdr := append([]byte("BZh9"), BlockMagic...)
	eos := append([]byte("BZh1"), EOSMagic...)
	data := bytes.Join([][]byte{[]byte("xxBZh9"), hdr, []byte("BZh0"), eos, []byte("BZ")}, nil)
	r := bytes.NewReader(data)
	first := int64(6)
	second := first + int64(len(hdr)) + 4
	for _, tc := range []struct {
		from, end, want int64
		found           bool
	}{
		{0, int64(len(data)), first, true},
		{first, int64(len(data)), first, true},
		{first + 1, int64(len(data)), second, true},
		{second + 1, int64(len(data)), 0, false},
		{0, first + 9, 0, false}, // header cut by end
	} {
		got, found, err := NextStreamHeader(r, tc.from, tc.end)
		if err != nil || found != tc.found || got != tc.want {
			t.Errorf("next(%d, %d) = %d %v %v, want %d %v", tc.from, tc.end, got, found, err, tc.want, tc.found)
		}
	}
	if got := PrevStreamHeader(r, 0, second+3); got != second {
		t.Errorf("prev = %d, want %d", got, second)
	}
	if got := PrevStreamHeader(r, 0, second); got != first {
		t.Errorf("prev before second = %d, want %d", got, first)
	}
}

// Lookup lists a stream's pages with their ids and titles (titles may hold colons).
func TestLookup(t *testing.T) {
	path := t.TempDir() + "/index.txt"
	if err := os.WriteFile(path, []byte("5:1:A\n5:2:B: c\n9:3:C\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := Lookup(path, []int64{5, 7})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(got[5]) != 2 || got[5][1] != (Entry{ID: "2", Title: "B: c"}) {
		t.Fatalf("Lookup = %v", got)
	}
}

package textpolicy

import (
	"reflect"
	"testing"
	"unicode/utf8"
)

func TestClean(t *testing.T) {
	tests := []struct {
		name, in, want string
		counts         Counts
	}{
		{"clean", "plain text\twith\nlines\r\n", "plain text\twith\nlines\r\n", Counts{}},
		{"unicode", "Ελληνικά ɛ 日本 \u200d", "Ελληνικά ɛ 日本 \u200d", Counts{}},
		{"nul", "a\x00b\x00", "ab", Counts{StrippedControl: 2}},
		{"c0 and del", "a\x01\x1f\x7fb\x0c", "ab", Counts{StrippedControl: 4}},
		{"c1", "a\u0085\u009fb", "ab", Counts{StrippedControl: 2}},
		{"one invalid byte", "a\xffb", "a\uFFFDb", Counts{RepairedUTF8: 1}},
		{"a run is one repair", "a\xff\xfe\xfdb", "a\uFFFDb", Counts{RepairedUTF8: 1}},
		{"two runs", "\xc3x\xe2\x82", "\uFFFDx\uFFFD", Counts{RepairedUTF8: 2}},
		{"both", "\x00\xff", "\uFFFD", Counts{RepairedUTF8: 1, StrippedControl: 1}},
		{"control between bad bytes", "\xff\x00\xff", "\uFFFD\uFFFD", Counts{RepairedUTF8: 2, StrippedControl: 1}},
	}
	for _, tc := range tests {
		c := Counts{}
		if got := Clean(tc.in, c); got != tc.want || !reflect.DeepEqual(c, tc.counts) {
			t.Errorf("%s: Clean(%q) = %q %v, want %q %v", tc.name, tc.in, got, c, tc.want, tc.counts)
		}
		if got := string(CleanBytes([]byte(tc.in), nil)); got != tc.want {
			t.Errorf("%s: CleanBytes = %q", tc.name, got)
		}
	}
}

func FuzzClean(f *testing.F) {
	f.Add("a\x00b\xff\xfe")
	f.Add("\u0085ok")
	f.Fuzz(func(t *testing.T, s string) {
		c := Counts{}
		out := Clean(s, c)
		if !utf8.ValidString(out) {
			t.Fatalf("invalid output %q", out)
		}
		for _, r := range out {
			if isControl(r) {
				t.Fatalf("control %U left in %q", r, out)
			}
		}
		if again := Clean(out, c); again != out {
			t.Fatalf("not idempotent: %q -> %q", out, again)
		}
		if (c[RepairedUTF8] == 0 && c[StrippedControl] == 0) != (out == s) {
			t.Fatalf("changed %q -> %q but counted %v", s, out, c)
		}
	})
}

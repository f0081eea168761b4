package wikitext

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestPlain(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"empty", "", ""},
		{"prose", "Just text.", "Just text."},
		{"template", "A {{cite|x=1}} B", "A B"},
		{"nested template", "A{{a|{{b|{{c}}}}|d}}B", "AB"},
		{"parser function", "X {{#if:{{{1|}}}|yes|no}} Y", "X Y"},
		{"triple brace parameter", "a {{{1}}} b", "a b"},
		{"template over lines", "{{Infobox\n| name = X\n| born = {{birth date|1950}}\n}}\n'''X''' is a person.", "X is a person."},
		{"ref", "Fact.<ref>{{cite web|url=http://x}}</ref> More.", "Fact. More."},
		{"ref self-closing", `Fact.<ref name="a" /> More.`, "Fact. More."},
		{"ref with attributes", `Fact.<ref name="a>b">text</ref> More.`, "Fact. More."},
		{"references", "X\n<references />\nY", "X\n\nY"},
		{"table", "Before\n{| class=\"wikitable\"\n|-\n| a || b\n|}\nAfter", "Before\n\nAfter"},
		{"nested table", "A\n{|\n|\n{|\n| x\n|}\n| y\n|}\nB", "A\n\nB"},
		{"table in template", "A{{box|\n{|\n| x\n|}\n}}B", "AB"},
		{"link", "[[Paris]] is", "Paris is"},
		{"piped link", "the [[Paris|capital]] city", "the capital city"},
		{"link trail", "many [[cat]]s", "many cats"},
		{"pipe trick", "[[Paris (city)|]]", "Paris (city)"},
		{"colon link", "see [[:Category:Cities]]", "see Category:Cities"},
		{"file", "A [[File:x.jpg|thumb|A [[b|c]] caption]] B", "A B"},
		{"image", "[[Image:y.png|left]]Text", "Text"},
		{"media", "[[Media:z.ogg]]Text", "Text"},
		{"category", "Text\n[[Category:Cities| ]]", "Text"},
		{"localised file", "[[Fael:x.jpg|thumb|caption]]Text", "Text"},
		{"akan category, latin open e", "Text\n[[Nkyekyɛmu:Ghana]]", "Text"},
		{"akan category, greek epsilon", "Text\n[[Nkyekyεmu:Ghana]]", "Text"},
		{"category lower case and underscores", "Text\n[[category: Some_thing]]\n[[CATEGORY:X]]", "Text"},
		{"file link as url path", "Text\n[[/wiki/File:Idrija_lace.webm|thumb|Idrija]]", "Text"},
		{"other namespace stays text", "see [[Help:Contents|help]] and [[Template:X]]", "see help and Template:X"},
		{"interlanguage", "Text\n[[de:Paris]]\n[[zh-min-nan:Paris]]", "Text"},
		{"piped interwiki", "[[wikt:foo|foo]] bar", "foo bar"},
		{"external labelled", "see [http://example.com the site] now", "see the site now"},
		{"external bare", "see [http://example.com] now", "see now"},
		{"bracket not a link", "a [note] b", "a [note] b"},
		{"bold italic", "'''bold''' ''it'' '''''both'''''", "bold it both"},
		{"apostrophe bold", "l''''amour'''", "l'amour"},
		{"heading", "== History ==\nText", "History\nText"},
		{"heading deep", "====Sub====", "Sub"},
		{"comment", "A<!-- hidden {{x}} -->B", "AB"},
		{"math", "E <math>x^2</math> F", "E F"},
		{"gallery", "A\n<gallery>\nx.jpg|y\n</gallery>\nB", "A\n\nB"},
		{"timeline", "A<timeline>x</timeline>B", "AB"},
		{"html tags kept content", "H<sub>2</sub>O <span style=\"x\">ok</span> <b>b</b>", "H2O ok b"},
		{"br", "a<br>b<br />c", "a\nb\nc"},
		{"entities", "a&amp;b&nbsp;c &ndash; &#65;&#x42;", "a&b c – AB"},
		{"magic words", "__TOC__\nText __NOTOC__", "Text"},
		{"list markers", "* one\n# two\n: three\n; four", "one\ntwo\nthree\nfour"},
		{"horizontal rule", "a\n----\nb", "a\n\nb"},
		{"blank runs", "a\n\n\n\n b \n", "a\n\nb"},
		{"trailing space", "a   \nb\t", "a\nb"},
		{"less than", "a < b and c > d", "a < b and c > d"},
		{"unclosed template ends at paragraph", "A {{broken\n| x\n\nNext para.", "A\n\nNext para."},
		{"unclosed template at end", "A {{broken", "A"},
		{"unclosed table ends at paragraph", "A\n{|\n| x\n\nB", "A\n\nB"},
		{"unclosed link keeps text", "a [[b c", "a b c"},
		{"stray closers", "a }} b ]] c\n|}\nd", "a b c\n\nd"},
		{"unclosed comment", "a <!-- b\n\nc", "a\n\nc"},
		{"unclosed ref", "a<ref>b\n\nc", "a\n\nc"},
		{"template inside link", "[[Foo|a {{b}} c]]", "a c"},
		{"link inside template closes first", "{{a|[[b]]}} c", "c"},
		{"crossed", "[[a {{b]] c", "a c"},
		{"nowiki tag stripped", "<nowiki>x</nowiki>", "x"},
		{"empty parentheses", "Albedo ({{IPAc-en|x}}) is", "Albedo is"},
		{"utf8", "Ɔkɔm [[Nkyekyεmu:x]] ɛ", "Ɔkɔm ɛ"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Plain(tc.in); got != tc.want {
				t.Errorf("Plain(%q)\n got %q\nwant %q", tc.in, got, tc.want)
			}
		})
	}
}

// TestPlainLinear feeds inputs built to make naive matchers quadratic; each must convert fast.
func TestPlainLinear(t *testing.T) {
	const n = 200_000
	inputs := map[string]string{
		"open braces":   strings.Repeat("{{a ", n),
		"open links":    strings.Repeat("[[a ", n),
		"open comments": strings.Repeat("<!-- a ", n),
		"open refs":     strings.Repeat("<ref>a ", n),
		"ext links":     strings.Repeat("[http://a ", n),
		"tags":          strings.Repeat("<b ", n),
		"tables":        strings.Repeat("{|\n", n),
		"closers":       strings.Repeat("}}]]\n|}\n", n),
		"colons":        strings.Repeat(":", n) + "{|",
	}
	for name, in := range inputs {
		start := time.Now()
		_ = Plain(in)
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%s: %d bytes took %v", name, len(in), d)
		}
	}
}

func FuzzPlain(f *testing.F) {
	for _, s := range []string{
		"{{a|[[b|c]]}}", "{|\n|x\n|}", "[[File:a|[[b]]]]", "<ref>x</ref>", "<!--", "'''''",
		"[http://x y]", "== h ==", "&amp;&#0;&#xD800;", "<b a='x>'>", "__TOC__", "{{{{{x}}}}}",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := Plain(s)
		if utf8.ValidString(s) && !utf8.ValidString(out) {
			t.Fatalf("invalid UTF-8 output for %q: %q", s, out)
		}
		if strings.Contains(out, "{{") && !strings.Contains(s, "&") {
			t.Fatalf("{{ survived in %q: %q", s, out)
		}
	})
}

package patentxml

import (
	"strings"
	"unicode"
)

// blocks start a new line: paragraphs, headings, claims and their clauses, list items, and the
// v2.5 equivalents (PARA, H, CLM, CLMSTEP).
var blocks = map[string]bool{
	"p": true, "paragraph": true, "heading": true, "h": true, "claim": true, "claim-text": true,
	"li": true, "br": true, "para": true, "clm": true, "clmstep": true, "dl": true, "dt": true,
	"dd": true, "ul": true, "ol": true, "figure": true, "caption": true, "description-of-drawings": true,
	"brfsum": true, "drwdesc": true, "detdesc": true, "section": true, "btext": true, "table": true,
	"tables": true,
}

// Formulas (<maths>, <math>, <chemistry>) are not listed anywhere: they render inline as the
// text they hold (MathML tokens such as "a+1"), and those that are only an <img> vanish with it.
//
// dropped elements carry no text worth embedding: images and their SGML entity references,
// paragraph numbers ("[0001]", pap only; v4 numbers are attributes), external table/sequence
// files and embedded sequence listings.
var dropped = map[string]bool{
	"img": true, "image": true, "emi": true, "number": true, "table-external-doc": true,
	"sequence-list": true, "us-sequence-list-doc": true, "sequence-cwu": true,
	"us-chemistry": true, "us-math": true,
}

type renderer struct {
	lines  []string
	cur    strings.Builder
	claims bool
}

// render flattens a section into lines. In claims, headings ("What is claimed is:") are dropped
// because v4 moved that statement out of <claims>; keeping it only for old formats would make
// the same patent's text depend on the format.
func render(n *node, claims bool) []string {
	r := &renderer{claims: claims}
	r.walk(n)
	r.flush()
	return r.lines
}

func (r *renderer) flush() {
	if s := clean(r.cur.String()); s != "" {
		r.lines = append(r.lines, s)
	}
	r.cur.Reset()
}

func (r *renderer) walk(n *node) {
	for _, k := range n.kids {
		switch {
		case k.name == "":
			r.cur.WriteString(k.text)
		case dropped[k.name]:
		case r.claims && (k.name == "heading" || k.name == "h"):
		case k.name == "table":
			r.flush()
			r.table(k)
		case blocks[k.name]:
			r.flush()
			r.walk(k)
			r.flush()
		default:
			r.walk(k)
		}
	}
}

// table writes each row as one line of its non-empty cells joined by " | ". Empty cells are
// layout (spanning headers, spacer columns) and would only add separators to the text.
func (r *renderer) table(t *node) {
	for _, row := range all(t, "row") {
		var cells []string
		for _, e := range all(row, "entry") {
			if s := flat(e); s != "" {
				cells = append(cells, s)
			}
		}
		if len(cells) > 0 {
			r.lines = append(r.lines, strings.Join(cells, " | "))
		}
	}
}

// flat is the element's text with whitespace collapsed; dropped elements are left out.
func flat(n *node) string {
	if n == nil {
		return ""
	}
	var sb strings.Builder
	var walk func(*node)
	walk = func(n *node) {
		for _, k := range n.kids {
			if k.name == "" {
				sb.WriteString(k.text)
			} else if !dropped[k.name] {
				if blocks[k.name] || k.name == "entry" {
					sb.WriteByte(' ')
				}
				walk(k)
			}
		}
	}
	walk(n)
	return clean(sb.String())
}

// clean collapses whitespace runs (including the em/en spaces USPTO uses for layout) into one
// space and drops invisible operators (U+2061-U+2064 from MathML), soft hyphens and controls.
func clean(s string) string {
	var sb strings.Builder
	sb.Grow(len(s))
	space := false
	for _, c := range s {
		switch {
		case unicode.IsSpace(c):
			space = true
			continue
		case c >= 0x2061 && c <= 0x2064, c == 0xAD, c == 0x200B, c == 0xFEFF, unicode.IsControl(c):
			continue
		}
		if space && sb.Len() > 0 {
			sb.WriteByte(' ')
		}
		space = false
		sb.WriteRune(c)
	}
	return sb.String()
}

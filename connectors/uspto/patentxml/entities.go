package patentxml

import (
	"bytes"
	"html"
	"strconv"
	"strings"
	"unicode/utf8"
)

// isoGreek is ISOgrk1, the Greek entity set the USPTO DTDs include (&lgr; &Dgr; appear in the
// shared files). HTML5 does not define it, so html.UnescapeString cannot be used for these.
var isoGreek = map[string]string{
	"agr": "α", "bgr": "β", "ggr": "γ", "dgr": "δ", "egr": "ε", "zgr": "ζ", "eegr": "η",
	"thgr": "θ", "igr": "ι", "kgr": "κ", "lgr": "λ", "mgr": "μ", "ngr": "ν", "xgr": "ξ",
	"ogr": "ο", "pgr": "π", "rgr": "ρ", "sgr": "σ", "sfgr": "ς", "tgr": "τ", "ugr": "υ",
	"phgr": "φ", "khgr": "χ", "psgr": "ψ", "ohgr": "ω",
	"Agr": "Α", "Bgr": "Β", "Ggr": "Γ", "Dgr": "Δ", "Egr": "Ε", "Zgr": "Ζ", "EEgr": "Η",
	"THgr": "Θ", "Igr": "Ι", "Kgr": "Κ", "Lgr": "Λ", "Mgr": "Μ", "Ngr": "Ν", "Xgr": "Ξ",
	"Ogr": "Ο", "Pgr": "Π", "Rgr": "Ρ", "Sgr": "Σ", "Tgr": "Τ", "Ugr": "Υ", "PHgr": "Φ",
	"KHgr": "Χ", "PSgr": "Ψ", "OHgr": "Ω",
}

// maxEntityName bounds how far a ';' is looked for: a bare '&' in old text is not an entity.
const maxEntityName = 32

// decodeEntities resolves character references, the XML entities, ISO Greek and the HTML5
// named set (a superset of the ISO Latin, publishing, numeric and technical sets the USPTO DTDs
// declare: &lsquo; &mdash; &deg; &plusmn; &micro; &lsqb; &frac12; ...). An unknown named
// reference becomes nothing and is counted; a '&' not followed by a reference stays literal.
func decodeEntities(b []byte, unknown *int) string {
	if bytes.IndexByte(b, '&') < 0 {
		return string(b)
	}
	var sb strings.Builder
	sb.Grow(len(b))
	for len(b) > 0 {
		amp := bytes.IndexByte(b, '&')
		if amp < 0 {
			sb.Write(b)
			break
		}
		sb.Write(b[:amp])
		b = b[amp:]
		semi := bytes.IndexByte(b[1:min(len(b), maxEntityName+2)], ';')
		if semi <= 0 {
			sb.WriteByte('&')
			b = b[1:]
			continue
		}
		name := string(b[1 : 1+semi])
		b = b[semi+2:]
		if name[0] == '#' {
			if r, ok := charRef(name[1:]); ok {
				sb.WriteRune(r)
			}
			continue
		}
		if s, ok := namedEntity(name); ok {
			sb.WriteString(s)
		} else if validName(name) {
			*unknown++
		} else { // "AT&T; ..." and the like: not a reference at all
			sb.WriteString("&" + name + ";")
		}
	}
	return sb.String()
}

func validName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// charRef decodes the digits of "&#...;"; references to characters XML forbids are dropped.
func charRef(s string) (rune, bool) {
	var v uint64
	var err error
	if len(s) > 1 && (s[0] == 'x' || s[0] == 'X') {
		v, err = strconv.ParseUint(s[1:], 16, 32)
	} else {
		v, err = strconv.ParseUint(s, 10, 32)
	}
	if err != nil || v == 0 || v > utf8.MaxRune || (v >= 0xD800 && v <= 0xDFFF) {
		return 0, false
	}
	return rune(v), true
}

func namedEntity(name string) (string, bool) {
	switch name {
	case "amp":
		return "&", true
	case "lt":
		return "<", true
	case "gt":
		return ">", true
	case "quot":
		return `"`, true
	case "apos":
		return "'", true
	}
	if s, ok := isoGreek[name]; ok {
		return s, true
	}
	ref := "&" + name + ";"
	s := html.UnescapeString(ref)
	// html also decodes legacy references without ';' by prefix ("&notit;" -> "¬it;"); such a
	// partial decode still ends in ';' and is not a match for the whole name.
	if s == ref || (strings.HasSuffix(s, ";") && name != "semi") {
		return "", false
	}
	return s, true
}

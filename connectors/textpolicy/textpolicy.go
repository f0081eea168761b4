// Package textpolicy is the one rule every source applies to the text and title of a document
// before it leaves the source, so that the same bytes become the same document whichever
// connector read them, and nothing is changed without being counted:
//
//   - invalid UTF-8: each run of bytes that is not UTF-8 becomes one U+FFFD, counted as
//     repaired_utf8 (one per run, not per byte: a run is one damaged spot);
//   - control characters: C0 controls other than tab, line feed and carriage return, DEL, and
//     the C1 controls U+0080-U+009F are removed, counted as stripped_control. NUL is among
//     them. They carry no text, tokenizers drop or mangle them, and XML forbids most.
//
// Whitespace, format characters (zero-width joiners, which scripts need) and everything else
// are left alone; what is text is each connector's business.
package textpolicy

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Count keys, as they appear in SourceStats.Text and the run summary's text_repairs.
const (
	RepairedUTF8    = "repaired_utf8"
	StrippedControl = "stripped_control"
	// NoTitle counts documents whose title was absent or unreadable (empty once cleaned); the
	// document is still read, under its id.
	NoTitle = "no_title"
)

// Counts accumulates what Clean changed. The zero value is ready; not safe for concurrent use.
type Counts map[string]int64

// Add merges o into c.
func (c Counts) Add(o map[string]int64) {
	for k, v := range o {
		c[k] += v
	}
}

// Clean applies the policy to s, adding what it changed to c (which may be nil).
func Clean(s string, c Counts) string {
	if clean(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	var repaired, stripped int64
	inBad := false
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			if !inBad {
				b.WriteRune(utf8.RuneError)
				repaired++
				inBad = true
			}
			i++
			continue
		}
		inBad = false
		if isControl(r) {
			stripped++
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	if c != nil {
		if repaired > 0 {
			c[RepairedUTF8] += repaired
		}
		if stripped > 0 {
			c[StrippedControl] += stripped
		}
	}
	return b.String()
}

// CleanBytes is Clean for raw input (a whole XML document) before it is parsed.
func CleanBytes(b []byte, c Counts) []byte {
	if cleanBytes(b) {
		return b
	}
	return []byte(Clean(string(b), c))
}

func isControl(r rune) bool {
	return r < 0x20 && r != '\t' && r != '\n' && r != '\r' || r >= 0x7f && r <= 0x9f
}

// clean is the fast path: valid UTF-8 with no control character to strip.
func clean(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 && c != '\t' && c != '\n' && c != '\r' || c == 0x7f {
			return false
		}
		if s[i] >= 0x80 {
			return slowClean(s[i:])
		}
	}
	return true
}

func cleanBytes(b []byte) bool {
	for i := 0; i < len(b); i++ {
		if c := b[i]; c < 0x20 && c != '\t' && c != '\n' && c != '\r' || c == 0x7f {
			return false
		}
		if b[i] >= 0x80 {
			return slowClean(string(b[i:]))
		}
	}
	return true
}

func slowClean(s string) bool {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 || isControl(r) {
			return false
		}
		i += n
	}
	return true
}

// IsBlank reports whether s holds nothing a WordPiece tokenizer keeps: only whitespace,
// control (Cc), format (Cf: zero-width spaces and joiners, BOM) and private-use characters,
// and U+FFFD, which BERT's text cleaning removes. Such a text tokenizes to no token at all.
// It is the one definition of an empty document for every source and command (ops/COMMANDS.md,
// "Empty documents").
func IsBlank(s string) bool {
	for _, r := range s {
		if !unicode.IsSpace(r) && !unicode.In(r, unicode.Cc, unicode.Cf, unicode.Co) && r != utf8.RuneError {
			return false
		}
	}
	return true
}

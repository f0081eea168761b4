package wordpiece

import (
	"sync"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
	"golang.org/x/text/unicode/rangetable"
)

// Hugging Face's BertNormalizer and BertPreTokenizer take the general categories Cf, Co, Mn and
// P* from the Rust crate unicode_categories 0.1.1, whose tables are frozen at Unicode 8.0,
// while whitespace and lowercasing come from the Rust standard library (current Unicode).
// Go's tables are newer than 8.0, so a character counts as Cf/Mn/P here only if it was
// assigned by Unicode 8.0, and the few characters whose category changed since then are
// patched below. TestCodepointParity checks every code point against the real library.
var unicode8 = rangetable.Assigned("8.0.0")

// The NFD of Hugging Face's normaliser (crate unicode-normalization-alignments) predates
// Unicode 13.0: it leaves U+11938, whose decomposition arrived in 13.0, as it is. Characters
// assigned after 12.0 are therefore never decomposed here.
var unicode12 = rangetable.Assigned("12.0.0")

const (
	classDrop    uint8 = 1 << iota // removed by clean_text: NUL, U+FFFD, Cc/Cf/Co other than \t\n\r
	classSpace                     // Rust char::is_whitespace (White_Space)
	classPunct                     // BertPreTokenizer punctuation: ASCII punctuation or P* (Unicode 8.0)
	classMn                        // nonspacing mark (Unicode 8.0): removed by strip_accents
	classChinese                   // spaced out by handle_chinese_chars
	classKeepNFD                   // has a canonical decomposition the HF normaliser lacks
)

var (
	bmpOnce  sync.Once
	bmpClass []uint8 // class of every BMP code point, built on first use (64 KiB)
)

func classOf(r rune) uint8 {
	if r < 0x10000 {
		bmpOnce.Do(buildBMP)
		return bmpClass[r]
	}
	return computeClass(r)
}

func buildBMP() {
	c := make([]uint8, 0x10000)
	for r := range c {
		c[r] = computeClass(rune(r))
	}
	bmpClass = c
}

func computeClass(r rune) uint8 {
	var c uint8
	switch {
	case r == '\t' || r == '\n' || r == '\r':
	case r == 0 || r == utf8.RuneError || unicode.Is(unicode.Cc, r) || unicode.Is(unicode.Co, r):
		c |= classDrop
	case unicode.Is(unicode.Cf, r) && unicode.Is(unicode8, r):
		c |= classDrop
	}
	if unicode.IsSpace(r) {
		c |= classSpace
	}
	if isPunct8(r) {
		c |= classPunct
	}
	if isMn8(r) {
		c |= classMn
	}
	if isChinese(r) {
		c |= classChinese
	}
	if !unicode.Is(unicode12, r) {
		var buf [utf8.UTFMax]byte
		if norm.NFD.Properties(buf[:utf8.EncodeRune(buf[:], r)]).Decomposition() != nil {
			c |= classKeepNFD
		}
	}
	return c
}

func isPunct8(r rune) bool {
	if r < 0x80 {
		return r >= 33 && r <= 47 || r >= 58 && r <= 64 || r >= 91 && r <= 96 || r >= 123 && r <= 126
	}
	switch r {
	case 0x166D, 0x111C9: // Po in Unicode 8.0; So since 12.0 and Mn since 11.0
		return true
	}
	return unicode.IsPunct(r) && unicode.Is(unicode8, r)
}

func isMn8(r rune) bool {
	switch r {
	case 0x1734: // Mn in Unicode 8.0, Mc in current Go tables
		return true
	case 0x1885, 0x1886, 0xA9BD, 0x111C9: // became Mn only after Unicode 8.0
		return false
	}
	return unicode.Is(unicode.Mn, r) && unicode.Is(unicode8, r)
}

// isChinese is Hugging Face's (and the original BERT's) CJK test: the ideograph blocks only,
// not Hangul, kana or CJK punctuation.
func isChinese(r rune) bool {
	return r >= 0x4E00 && r <= 0x9FFF ||
		r >= 0x3400 && r <= 0x4DBF ||
		r >= 0x20000 && r <= 0x2A6DF ||
		r >= 0x2A700 && r <= 0x2B73F ||
		r >= 0x2B740 && r <= 0x2B81F ||
		r >= 0x2B920 && r <= 0x2CEAF ||
		r >= 0xF900 && r <= 0xFAFF ||
		r >= 0x2F800 && r <= 0x2FA1F
}

// lowerRune is Rust's char::to_lowercase for every character except 'İ' (the only
// unconditional multi-character mapping, handled by the caller). Rust maps character by
// character with no context, so 'Σ' is always 'σ', never the final form 'ς'.
func lowerRune(r rune) rune {
	if l := unicode.ToLower(r); l != r {
		return l
	}
	return lowerNewer(r)
}

// lowerNewer holds the lowercase mappings added in Unicode 16.0 and 17.0, which the Rust
// standard library behind the tokenizers wheel has and Go 1.26's unicode tables (15.0) lack.
// With newer Go tables unicode.ToLower already maps these and this is never reached for them.
func lowerNewer(r rune) rune {
	switch {
	case r >= 0x10D50 && r <= 0x10D65: // Garay
		return r + 0x20
	case r >= 0x16EA0 && r <= 0x16EB8: // Beria Erfe
		return r + 0x1B
	}
	switch r {
	case 0x1C89:
		return 0x1C8A
	case 0xA7CB:
		return 0x0264
	case 0xA7CC, 0xA7CE, 0xA7D2, 0xA7D4, 0xA7DA:
		return r + 1
	case 0xA7DC:
		return 0x019B
	}
	return r
}

// appendNFD appends the NFD of src as Hugging Face computes it: characters flagged
// classKeepNFD stay composed. They are starters, so normalising the text between them
// piecewise gives the same result as normalising it whole. it is caller-owned so that its
// reorder buffer is reused (norm.Form.Append allocates one per call).
func appendNFD(it *norm.Iter, dst, src []byte) []byte {
	start := 0
	for i := 0; i < len(src); {
		if src[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, n := utf8.DecodeRune(src[i:])
		if classOf(r)&classKeepNFD != 0 {
			dst = iterNFD(it, dst, src[start:i])
			dst = append(dst, src[i:i+n]...)
			start = i + n
		}
		i += n
	}
	return iterNFD(it, dst, src[start:])
}

func iterNFD(it *norm.Iter, dst, src []byte) []byte {
	it.Init(norm.NFD, src)
	for !it.Done() {
		dst = append(dst, it.Next()...)
	}
	return dst
}

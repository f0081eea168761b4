package wordpiece

import (
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Encode returns the content token ids of text (no [CLS]/[SEP], no truncation).
// Invalid UTF-8 bytes are read as U+FFFD, which is what a JSON or Python round trip of the same
// bytes would hand to Hugging Face.
func (t *Tokenizer) Encode(text string) []int32 {
	return t.AppendEncode(nil, text)
}

// AppendEncode appends the content token ids of text to dst and returns the extended slice.
func (t *Tokenizer) AppendEncode(dst []int32, text string) []int32 {
	ws := t.scratch.Get().(*workspace)
	start := 0
	if len(t.added) > 0 {
		// Added tokens are cut out of the raw text before any normalisation, exactly like
		// Hugging Face's AddedVocabulary: a literal "[SEP]" in a document becomes the [SEP]
		// id, while "[sep]" is normalised and split like any other text.
		for i := 0; i < len(text); i++ {
			if !t.addedAt[text[i]] {
				continue
			}
			for _, a := range t.added {
				if strings.HasPrefix(text[i:], a.content) {
					dst = t.encodeSegment(dst, ws, text[start:i])
					dst = append(dst, a.id)
					i += len(a.content) - 1
					start = i + 1
					break
				}
			}
		}
	}
	dst = t.encodeSegment(dst, ws, text[start:])
	t.scratch.Put(ws)
	return dst
}

// encodeSegment runs BertNormalizer, BertPreTokenizer and WordPiece over text that holds no
// added token. The normaliser's steps run in Hugging Face's order: clean_text, Chinese
// characters, strip_accents (NFD, drop Mn), lowercase.
func (t *Tokenizer) encodeSegment(dst []int32, ws *workspace, seg string) []int32 {
	if seg == "" {
		return dst
	}
	b := ws.clean[:0]
	for i := 0; i < len(seg); {
		c := seg[i]
		if c < utf8.RuneSelf {
			i++
			if t.cleanText && (c < 0x20 || c == 0x7F) {
				if c == '\t' || c == '\n' || c == '\r' {
					b = append(b, ' ')
				}
				continue
			}
			b = append(b, c)
			continue
		}
		r, n := utf8.DecodeRuneInString(seg[i:])
		i += n
		cl := classOf(r)
		if t.cleanText {
			if cl&classDrop != 0 {
				continue
			}
			if cl&classSpace != 0 {
				b = append(b, ' ')
				continue
			}
		}
		if t.chinese && cl&classChinese != 0 {
			b = append(b, ' ')
			b = utf8.AppendRune(b, r)
			b = append(b, ' ')
			continue
		}
		b = utf8.AppendRune(b, r)
	}
	ws.clean = b
	s := b
	if t.stripAccents && norm.NFD.QuickSpan(b) < len(b) {
		ws.nfd = appendNFD(&ws.iter, ws.nfd[:0], b)
		s = ws.nfd
	}

	word, nchars := ws.word[:0], 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			i++
			switch {
			case c == ' ' || c >= '\t' && c <= '\r':
				dst = t.emit(ws, dst, word, nchars)
				word, nchars = word[:0], 0
			case isPunct8(rune(c)):
				dst = t.emit(ws, dst, word, nchars)
				word, nchars = word[:0], 0
				dst = t.emit(ws, dst, s[i-1:i], 1)
			default:
				if t.lowercase && 'A' <= c && c <= 'Z' {
					c += 'a' - 'A'
				}
				word = append(word, c)
				nchars++
			}
			continue
		}
		r, n := utf8.DecodeRune(s[i:])
		i += n
		cl := classOf(r)
		if t.stripAccents && cl&classMn != 0 {
			continue
		}
		if t.lowercase {
			if r == 0x130 {
				// 'İ' lowercases to "i" + U+0307; neither is space or punctuation.
				word = append(word, 'i', 0xCC, 0x87)
				nchars += 2
				continue
			}
			if l := lowerRune(r); l != r {
				r, cl = l, classOf(l)
			}
		}
		switch {
		case cl&classSpace != 0:
			dst = t.emit(ws, dst, word, nchars)
			word, nchars = word[:0], 0
		case cl&classPunct != 0:
			dst = t.emit(ws, dst, word, nchars)
			word, nchars = word[:0], 0
			p := utf8.AppendRune(word, r)
			dst = t.emit(ws, dst, p, 1)
			word = p[:0]
		default:
			word = utf8.AppendRune(word, r)
			nchars++
		}
	}
	dst = t.emit(ws, dst, word, nchars)
	ws.word = word[:0]
	return dst
}

// emit hands one pre-token to WordPiece, or, when a test asked for the pre-tokens themselves,
// records it instead (that is how the Unicode handling is checked against Hugging Face's
// normaliser and pre-tokenizer one code point at a time).
func (t *Tokenizer) emit(ws *workspace, dst []int32, w []byte, nchars int) []int32 {
	if ws.preTokens != nil && len(w) > 0 {
		*ws.preTokens = append(*ws.preTokens, string(w))
		return dst
	}
	return t.wordPiece(dst, w, nchars)
}

// wordPiece appends the greedy longest-match-first pieces of one pre-token, or a single [UNK]
// when the word is too long or any part of it matches no piece.
func (t *Tokenizer) wordPiece(dst []int32, w []byte, nchars int) []int32 {
	if len(w) == 0 {
		return dst
	}
	if nchars > t.maxChars {
		return append(dst, t.unk)
	}
	mark := len(dst)
	for start := 0; start < len(w); {
		end := min(len(w), start+t.maxPieceLen)
		for end > start && end < len(w) && !utf8.RuneStart(w[end]) {
			end--
		}
		matched := false
		for end > start {
			var id int32
			var ok bool
			if start == 0 {
				id, ok = t.vocab[string(w[:end])]
			} else {
				id, ok = t.cont[string(w[start:end])]
			}
			if ok {
				dst = append(dst, id)
				matched = true
				break
			}
			end--
			for end > start && !utf8.RuneStart(w[end]) {
				end--
			}
		}
		if !matched {
			return append(dst[:mark], t.unk)
		}
		start = end
	}
	return dst
}

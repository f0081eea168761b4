// Package wikitext turns MediaWiki markup into readable plain text for embedding.
//
// It is not a MediaWiki parser: templates are dropped rather than expanded, because their
// expansion needs the wiki's template pages, and what is left (prose, link anchors, headings,
// list items) is what an embedding model should see.
//
// Conversion runs in passes, each linear in the input: comments, then tag blocks whose content
// is not prose (<ref>, <math>, <gallery>...), then bracket structures ({{templates}}, {| tables |},
// [[links]]) matched with one stack, then inline markup (external links, HTML tags, bold and
// italic quotes, magic words), then line markup (headings, list markers, rules), and last
// entities and whitespace.
//
// Unbalanced markup: a construct whose content is dropped (a template, a table, a comment, a
// <ref>) but that is never closed is dropped only up to the end of its paragraph (the next blank
// line) or the end of the text, never further. An unclosed [[ link loses only its brackets.
// Stray closers (}}, ]], |}) are removed.
package wikitext

import (
	"html"
	"strings"
)

// Plain returns readable plain text for the wikitext s, knowing only the canonical and common
// localised namespace names.
func Plain(s string) string { return defaultNamespaces.Plain(s) }

// Plain returns readable plain text for wikitext from the wiki whose namespace names n holds:
// links into its file, media and category namespaces are dropped whole.
func (n *Namespaces) Plain(s string) string {
	if s == "" {
		return ""
	}
	s = dropComments(s)
	s = dropBlockTags(s)
	s = dropBrackets(s, n)
	s = inline(s)
	s = lines(s)
	return s
}

// paraEnd returns the end of the paragraph holding position p: the index of the next blank
// line ("\n\n", possibly with spaces between) at or after p, or len(s).
func paraEnd(s string, p int) int {
	for {
		i := strings.IndexByte(s[p:], '\n')
		if i < 0 {
			return len(s)
		}
		j := p + i + 1
		for j < len(s) && (s[j] == ' ' || s[j] == '\t' || s[j] == '\r') {
			j++
		}
		if j >= len(s) || s[j] == '\n' {
			return p + i
		}
		p = j
	}
}

// dropComments removes <!-- ... -->. An unclosed comment is dropped to the end of its paragraph.
func dropComments(s string) string {
	if !strings.Contains(s, "<!--") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	// Once a search for "-->" fails from some position it fails from every later one, so the
	// failure is remembered to keep many unclosed comments linear.
	noClose := false
	for {
		i := strings.Index(s, "<!--")
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i])
		rest := s[i+4:]
		j := -1
		if !noClose {
			j = strings.Index(rest, "-->")
		}
		if j >= 0 {
			s = rest[j+3:]
			continue
		}
		noClose = true
		s = s[paraEnd(s, i):]
	}
}

// dropTags are tags whose content is not prose; the whole element goes.
var dropTags = map[string]bool{
	"ref": true, "references": true, "math": true, "chem": true, "ce": true,
	"gallery": true, "timeline": true, "score": true, "graph": true, "mapframe": true,
	"maplink": true, "templatedata": true, "templatestyles": true, "imagemap": true,
	"syntaxhighlight": true, "source": true, "hiero": true, "inputbox": true,
	"categorytree": true, "includeonly": true, "indicator": true, "section": true,
}

// tagAt parses an HTML-like tag starting at s[0] == '<'. It returns the lower-cased name,
// whether it is a closing tag, whether it is self-closing, and its length; ok is false when s
// does not start with something tag-shaped (a tag never spans a blank line or 4 KiB).
func tagAt(s string) (name string, closing, selfClosing bool, n int, ok bool) {
	i := 1
	if i < len(s) && s[i] == '/' {
		closing = true
		i++
	}
	start := i
	if i >= len(s) || !isLetter(s[i]) {
		return "", false, false, 0, false
	}
	for i < len(s) && isNameByte(s[i]) {
		i++
	}
	if i >= len(s) {
		return "", false, false, 0, false
	}
	if c := s[i]; c != ' ' && c != '\t' && c != '\n' && c != '/' && c != '>' {
		return "", false, false, 0, false
	}
	name = strings.ToLower(s[start:i])
	var quote byte
	lastSig := byte(0) // last non-space byte outside quotes
	for ; i < len(s) && i < 4096; i++ {
		c := s[i]
		if quote != 0 {
			if c == quote {
				quote = 0
				lastSig = c
			} else if c == '\n' {
				return "", false, false, 0, false
			}
			continue
		}
		switch c {
		case '"', '\'':
			// Only a quote that opens an attribute value counts, so that an apostrophe in
			// "a <b> it's" cannot hide the tag's end.
			if lastSig == '=' {
				quote = c
			}
		case '>':
			return name, closing, lastSig == '/', i + 1, true
		case '<':
			return "", false, false, 0, false
		case '\n':
			if i+1 < len(s) && s[i+1] == '\n' {
				return "", false, false, 0, false
			}
		}
		if c != ' ' && c != '\t' && c != '\n' {
			lastSig = c
		}
	}
	return "", false, false, 0, false
}

func isLetter(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }

func isNameByte(c byte) bool { return isLetter(c) || c >= '0' && c <= '9' }

// findClose returns the index in s of the closing tag </name ...>, and the end of that tag.
func findClose(s, name string) (at, end int) {
	off := 0
	for {
		i := strings.Index(s[off:], "</")
		if i < 0 {
			return -1, -1
		}
		p := off + i
		if len(s)-p-2 >= len(name) && strings.EqualFold(s[p+2:p+2+len(name)], name) {
			q := p + 2 + len(name)
			for q < len(s) && (s[q] == ' ' || s[q] == '\t' || s[q] == '\n') {
				q++
			}
			if q < len(s) && s[q] == '>' {
				return p, q + 1
			}
		}
		off = p + 2
	}
}

// dropBlockTags removes elements listed in dropTags, opening tag to closing tag. An unclosed
// one is dropped to the end of its paragraph.
func dropBlockTags(s string) string {
	if strings.IndexByte(s, '<') < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	// noClose[name] remembers that no closing tag exists after some point, keeping many
	// unclosed tags linear.
	noClose := map[string]bool{}
	last := 0
	for off := 0; off < len(s); {
		i := strings.IndexByte(s[off:], '<')
		if i < 0 {
			break
		}
		p := off + i
		name, closing, self, n, ok := tagAt(s[p:])
		if !ok || !dropTags[name] {
			off = p + 1
			continue
		}
		b.WriteString(s[last:p])
		end := p + n
		if !closing && !self {
			at, cend := -1, -1
			if !noClose[name] {
				at, cend = findClose(s[end:], name)
			}
			if at >= 0 {
				end += cend
			} else {
				noClose[name] = true
				end = max(end, paraEnd(s, p))
			}
		}
		last, off = end, end
	}
	b.WriteString(s[last:])
	return b.String()
}

// decodeEntities decodes HTML entities and turns no-break and other odd spaces into plain ones,
// since the text goes to a tokenizer rather than a renderer.
func decodeEntities(s string) string {
	if strings.IndexByte(s, '&') < 0 && !strings.Contains(s, "\u00a0") {
		return s
	}
	s = html.UnescapeString(s)
	return strings.NewReplacer("\u00a0", " ", "\u2009", " ", "\u202f", " ", "\u200b", "").Replace(s)
}

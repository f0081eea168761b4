package wikitext

import (
	"strings"
)

var urlSchemes = []string{"http://", "https://", "//", "ftp://", "ftps://", "mailto:", "irc://", "news:", "sftp://"}

func hasScheme(s string) bool {
	for _, sc := range urlSchemes {
		if len(s) >= len(sc) && strings.EqualFold(s[:len(sc)], sc) {
			return true
		}
	}
	return false
}

// blockTags become line breaks so that their contents do not run into each other.
var blockTags = map[string]bool{
	"br": true, "p": true, "div": true, "li": true, "tr": true, "hr": true, "dd": true,
	"dt": true, "h1": true, "h2": true, "h3": true, "h4": true, "h5": true, "h6": true,
	"blockquote": true, "center": true, "poem": true, "ul": true, "ol": true, "table": true,
}

// inline removes external-link brackets, HTML tags (keeping their content), bold and italic
// quotes and __MAGIC__ words.
func inline(s string) string {
	if !strings.ContainsAny(s, "[<'_") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	dropAt := -1  // the ']' closing a labelled external link, removed when reached
	noClose := -1 // a ']' search from before this position already failed on this line
	last := 0
	for i := 0; i < len(s); {
		j := strings.IndexAny(s[i:], "[]<'_")
		if j < 0 {
			break
		}
		i += j
		switch s[i] {
		case ']':
			if i == dropAt {
				b.WriteString(s[last:i])
				last, dropAt = i+1, -1
			}
			i++
		case '[':
			if dropAt >= 0 || i < noClose || !hasScheme(s[i+1:]) {
				i++
				continue
			}
			k := strings.IndexAny(s[i:], "]\n")
			if k < 0 || s[i+k] == '\n' {
				noClose = len(s)
				if k >= 0 {
					noClose = i + k
				}
				i++
				continue
			}
			end := i + k
			b.WriteString(s[last:i])
			if sp := strings.IndexAny(s[i:end], " \t"); sp >= 0 {
				last, dropAt = i+sp+1, end // [url label]: keep the label
			} else {
				last = end + 1 // [url]: MediaWiki shows a number; nothing worth keeping
			}
			i = last
		case '<':
			name, _, _, n, ok := tagAt(s[i:])
			if !ok {
				i++
				continue
			}
			b.WriteString(s[last:i])
			if blockTags[name] {
				b.WriteByte('\n')
			}
			last = i + n
			i = last
		case '\'':
			n := runLen(s, i, '\'')
			if n >= 2 {
				b.WriteString(s[last:i])
				switch {
				case n == 4:
					b.WriteByte('\'') // an apostrophe followed by bold
				case n > 5:
					b.WriteString(s[i : i+n-5])
				}
				last = i + n
			}
			i += n
		case '_':
			if e := magicWordEnd(s, i); e > 0 {
				b.WriteString(s[last:i])
				last = e
				i = e
				continue
			}
			i++
		}
	}
	b.WriteString(s[last:])
	return b.String()
}

// magicWordEnd returns the end of a behaviour switch like __TOC__ starting at i, or 0.
func magicWordEnd(s string, i int) int {
	if !strings.HasPrefix(s[i:], "__") {
		return 0
	}
	j := i + 2
	for j < len(s) && s[j] >= 'A' && s[j] <= 'Z' {
		j++
	}
	if j == i+2 || !strings.HasPrefix(s[j:], "__") {
		return 0
	}
	return j + 2
}

// lines handles line-level markup (headings, list markers, rules, indentation), decodes
// entities and normalises whitespace: single spaces, no trailing space, at most one blank line.
func lines(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	blank := true // suppresses blank lines at the start
	for s != "" {
		line := s
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			line, s = s[:i], s[i+1:]
		} else {
			s = ""
		}
		line = cleanLine(line)
		if line == "" {
			if !blank {
				b.WriteByte('\n')
				blank = true
			}
			continue
		}
		b.WriteString(line)
		b.WriteByte('\n')
		blank = false
	}
	return strings.TrimRight(b.String(), "\n")
}

func cleanLine(line string) string {
	line = strings.TrimSpace(line)
	if line == "" {
		return ""
	}
	if line[0] == '=' && line[len(line)-1] == '=' {
		line = strings.TrimSpace(strings.Trim(line, "="))
	}
	if strings.HasPrefix(line, "----") {
		line = strings.TrimLeft(line, "-")
	}
	line = strings.TrimLeft(line, "*#:; \t")
	line = dropBracketRuns(line)
	line = decodeEntities(line)
	if strings.Contains(line, "(") {
		// Dropped templates (pronunciations, dates) leave empty parentheses behind.
		line = strings.ReplaceAll(strings.ReplaceAll(line, "( )", ""), "()", "")
	}
	return collapseSpaces(line)
}

// collapseSpaces turns runs of spaces and tabs into one space and trims both ends; dropped
// markup tends to leave gaps behind.
func collapseSpaces(s string) string {
	if !strings.Contains(s, "  ") && !strings.ContainsAny(s, "\t\r") {
		return strings.TrimSpace(s)
	}
	var b strings.Builder
	b.Grow(len(s))
	space := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == ' ' || c == '\t' || c == '\r' {
			space = true
			continue
		}
		if space && b.Len() > 0 {
			b.WriteByte(' ')
		}
		space = false
		b.WriteByte(c)
	}
	return b.String()
}

// dropBracketRuns removes runs of two or more of the same bracket. Earlier passes only leave
// single brackets, but removing markup that sat between two of them (a bold or italic quote
// run, a tag) can join them, and a leftover "{{" or "]]" would read as markup to a later reader.
func dropBracketRuns(s string) string {
	if !strings.Contains(s, "{{") && !strings.Contains(s, "}}") && !strings.Contains(s, "[[") && !strings.Contains(s, "]]") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		c := s[i]
		if c == '{' || c == '}' || c == '[' || c == ']' {
			if n := runLen(s, i, c); n >= 2 {
				i += n
				continue
			}
		}
		b.WriteByte(c)
		i++
	}
	return b.String()
}

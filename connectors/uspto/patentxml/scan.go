package patentxml

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
)

// node is an element (name != "") or a text run (name == ""). Names are lower-cased so that the
// upper-case v2.5 (PATDOC) tags and the lower-case v4 tags go through the same rendering code.
type node struct {
	name  string
	text  string
	attrs map[string]string
	kids  []*node
}

// maxDepth bounds nesting: rendering recurses, and real documents stay far below 100 levels.
const maxDepth = 512

var errTruncated = errors.New("truncated document: root element not closed")

// tree is what the tolerant scanner makes of one document.
type tree struct {
	root     *node
	doctype  string // the DOCTYPE declaration's text, without the internal subset
	unknown  int    // named entity references that are neither XML, HTML nor ISO Greek
	complete bool   // the root element was closed
}

// scan builds a tree from one document. It is a hand scanner rather than encoding/xml because
// the old formats are SGML-flavoured: undeclared entities, stray '<' and '&' in text, unclosed
// elements. It never resolves DTDs or internal entity declarations (nothing is fetched, and
// entity expansion bombs cannot happen); unmatched end tags are ignored and unclosed elements
// are closed by their parent's end tag.
func scan(data []byte) (*tree, error) {
	t := &tree{}
	var stack []*node
	top := func() *node {
		if len(stack) == 0 {
			return nil
		}
		return stack[len(stack)-1]
	}
	i := 0
	for i < len(data) {
		if data[i] != '<' {
			j := bytes.IndexByte(data[i:], '<')
			if j < 0 {
				j = len(data) - i
			}
			if p := top(); p != nil {
				p.kids = append(p.kids, &node{text: decodeEntities(data[i:i+j], &t.unknown)})
			}
			i += j
			continue
		}
		rest := data[i:]
		switch {
		case bytes.HasPrefix(rest, []byte("<!--")):
			i = skipPast(data, i+4, "-->")
		case bytes.HasPrefix(rest, []byte("<![CDATA[")):
			end := bytes.Index(data[i+9:], []byte("]]>"))
			if end < 0 {
				end = len(data) - i - 9
			}
			if p := top(); p != nil {
				p.kids = append(p.kids, &node{text: string(data[i+9 : i+9+end])})
			}
			i = min(len(data), i+9+end+3)
		case bytes.HasPrefix(rest, []byte("<?")):
			i = skipPast(data, i+2, "?>")
		case bytes.HasPrefix(rest, []byte("<!")):
			end := declEnd(data, i+2)
			if t.doctype == "" && len(rest) > 9 && strings.EqualFold(string(rest[2:9]), "DOCTYPE") {
				decl := data[i:end]
				if k := bytes.IndexByte(decl, '['); k >= 0 {
					decl = decl[:k]
				}
				t.doctype = strings.TrimSpace(strings.TrimSuffix(string(decl), ">"))
			}
			i = end
		case len(rest) > 1 && rest[1] == '/':
			end := bytes.IndexByte(rest, '>')
			if end < 0 {
				i = len(data)
				break
			}
			name := strings.ToLower(strings.TrimSpace(string(rest[2:end])))
			for k := len(stack) - 1; k >= 0; k-- {
				if stack[k].name == name {
					stack = stack[:k]
					if k == 0 {
						t.complete = true
					}
					break
				}
			}
			i += end + 1
		case len(rest) > 1 && isNameStart(rest[1]):
			n, selfClose, next, ok := startTag(data, i, &t.unknown)
			if !ok { // a tag cut off by the end of the data
				i = len(data)
				break
			}
			i = next
			if p := top(); p != nil {
				p.kids = append(p.kids, n)
			} else if t.root == nil {
				t.root = n
			} else {
				continue // content after the root element: ignored
			}
			if !selfClose {
				if len(stack) >= maxDepth {
					return t, fmt.Errorf("elements nested deeper than %d", maxDepth)
				}
				stack = append(stack, n)
			} else if n == t.root {
				t.complete = true
			}
		default: // a literal '<' in text, e.g. "a < b" in old SGML-ish files
			if p := top(); p != nil {
				p.kids = append(p.kids, &node{text: "<"})
			}
			i++
		}
	}
	if t.root == nil {
		return t, errors.New("no root element")
	}
	if !t.complete {
		return t, errTruncated
	}
	return t, nil
}

func skipPast(data []byte, from int, end string) int {
	k := bytes.Index(data[from:], []byte(end))
	if k < 0 {
		return len(data)
	}
	return from + k + len(end)
}

// declEnd finds the '>' closing a <!...> declaration, stepping over quoted strings and the
// bracketed internal subset of a DOCTYPE (which holds '>' of its own declarations).
func declEnd(data []byte, i int) int {
	depth := 0
	var quote byte
	for ; i < len(data); i++ {
		c := data[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '[':
			depth++
		case c == ']':
			depth--
		case c == '>' && depth <= 0:
			return i + 1
		}
	}
	return len(data)
}

func isNameStart(c byte) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// startTag parses "<name attr="v" ...>" at data[i]. Attribute values may be unquoted (SGML).
func startTag(data []byte, i int, unknown *int) (n *node, selfClose bool, next int, ok bool) {
	j := i + 1
	for j < len(data) && !isSpace(data[j]) && data[j] != '>' && data[j] != '/' {
		j++
	}
	n = &node{name: strings.ToLower(string(data[i+1 : j]))}
	for {
		for j < len(data) && isSpace(data[j]) {
			j++
		}
		if j >= len(data) {
			return nil, false, len(data), false
		}
		switch data[j] {
		case '>':
			return n, false, j + 1, true
		case '/':
			if j+1 < len(data) && data[j+1] == '>' {
				return n, true, j + 2, true
			}
			j++
			continue
		}
		k := j
		for k < len(data) && !isSpace(data[k]) && data[k] != '=' && data[k] != '>' && data[k] != '/' {
			k++
		}
		key := strings.ToLower(string(data[j:k]))
		if k == j { // a stray character such as a quote: step over it
			k++
		}
		j = k
		for j < len(data) && isSpace(data[j]) {
			j++
		}
		val := ""
		if j < len(data) && data[j] == '=' {
			j++
			for j < len(data) && isSpace(data[j]) {
				j++
			}
			if j < len(data) && (data[j] == '"' || data[j] == '\'') {
				q := data[j]
				end := bytes.IndexByte(data[j+1:], q)
				if end < 0 {
					return nil, false, len(data), false
				}
				val = decodeEntities(data[j+1:j+1+end], unknown)
				j += end + 2
			} else {
				k := j
				for k < len(data) && !isSpace(data[k]) && data[k] != '>' {
					k++
				}
				val = string(data[j:k])
				j = k
			}
		}
		if key != "" {
			if n.attrs == nil {
				n.attrs = map[string]string{}
			}
			n.attrs[key] = val
		}
	}
}

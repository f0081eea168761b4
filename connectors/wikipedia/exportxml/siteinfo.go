package exportxml

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/reignpipe/reignpipe/connectors/wikipedia/wikitext"
)

// maxSiteinfo bounds how far into the decompressed dump Open looks for <siteinfo>: it is the
// first element of every export, a few KiB long.
const maxSiteinfo = 4 << 20

// ReadSiteinfo returns the <siteinfo> element at the head of a decompressed dump, or nil when
// the dump has none (a <page> comes first, or the head holds neither), and the first bytes of
// the text, for errors about what the file is instead. Read errors end the search quietly:
// the workers meet them again and report them with their position.
func ReadSiteinfo(r io.Reader) (si, head []byte) {
	var buf []byte
	chunk := make([]byte, 64<<10)
	for len(buf) < maxSiteinfo {
		n, err := r.Read(chunk)
		buf = append(buf, chunk[:n]...)
		head = buf[:min(len(buf), 512)]
		start := bytes.Index(buf, []byte("<siteinfo>"))
		if p := bytes.Index(buf, pageStart); p >= 0 && (start < 0 || p < start) {
			return nil, head
		}
		if start >= 0 {
			if end := bytes.Index(buf[start:], siteinfoEnd); end >= 0 {
				return buf[start : start+end+len(siteinfoEnd)], head
			}
		}
		if err != nil {
			return nil, head
		}
	}
	return nil, head
}

// RootElement names the first element in head ("us-patent-grant", "html"), skipping the XML
// declaration, comments and a DOCTYPE; "" when head holds none.
func RootElement(head []byte) string {
	for {
		i := bytes.IndexByte(head, '<')
		if i < 0 || i+1 >= len(head) {
			return ""
		}
		head = head[i+1:]
		if c := head[0]; c == '?' || c == '!' {
			continue
		}
		j := 0
		for j < len(head) && j < 64 && (isLetterOrDigit(head[j]) || head[j] == '-' || head[j] == '_' || head[j] == ':' || head[j] == '.') {
			j++
		}
		if j == 0 {
			continue
		}
		return string(head[:j])
	}
}

func isLetterOrDigit(c byte) bool {
	return c|0x20 >= 'a' && c|0x20 <= 'z' || c >= '0' && c <= '9'
}

// ParseNamespaces builds the namespace table of a <siteinfo> element: the canonical and
// common names plus every <namespace key="N">Name</namespace> it declares (and
// <namespacealias key="N">, which some exports add). It returns the table, the number of
// names declared, and the first malformed declaration, if any; the table holds the rest.
func ParseNamespaces(b []byte) (*wikitext.Namespaces, int, error) {
	ns := wikitext.DefaultNamespaces()
	declared := 0
	var firstErr error
	note := func(err error) {
		if firstErr == nil {
			firstErr = err
		}
	}
	for pos := 0; pos < len(b); {
		i := bytes.Index(b[pos:], []byte("<namespace"))
		if i < 0 {
			break
		}
		lt := pos + i
		name, attrs, closing, self, n, err := parseTag(b[lt:])
		if err != nil {
			note(fmt.Errorf("siteinfo byte %d: %w", lt, err))
			pos = lt + len("<namespace")
			continue
		}
		pos = lt + n
		if closing || self || (name != "namespace" && name != "namespacealias") {
			continue // <namespaces>, and the main namespace's empty <namespace key="0" />
		}
		end := bytes.Index(b[pos:], []byte("</"+name+">"))
		if end < 0 {
			note(fmt.Errorf("siteinfo byte %d: <%s> not closed", lt, name))
			continue
		}
		content := b[pos : pos+end]
		pos += end + len(name) + 3
		key, err := attrKey(attrs)
		if err != nil {
			note(fmt.Errorf("siteinfo byte %d: <%s>: %w", lt, name, err))
			continue
		}
		if bytes.IndexByte(content, '<') >= 0 {
			note(fmt.Errorf("siteinfo byte %d: <%s key=%d> holds markup", lt, name, key))
			continue
		}
		if text := Unescape(content); wikitext.NormalizeNamespace(text) != "" {
			ns.Add(key, text)
			declared++
		}
	}
	return ns, declared, firstErr
}

// attrKey reads the key="N" (or id="N") attribute of a namespace declaration.
func attrKey(attrs []byte) (int, error) {
	for _, a := range []string{"key", "id"} {
		v, ok := attrValue(attrs, a)
		if !ok {
			continue
		}
		k, err := strconv.Atoi(v)
		if err != nil {
			return 0, fmt.Errorf("%s=%q is not a number", a, v)
		}
		return k, nil
	}
	return 0, errors.New("no key attribute")
}

// attrValue finds name="value" (or single quotes) among a tag's attributes.
func attrValue(attrs []byte, name string) (string, bool) {
	for i := 0; i < len(attrs); {
		j := bytes.Index(attrs[i:], []byte(name))
		if j < 0 {
			return "", false
		}
		p := i + j
		i = p + len(name)
		if p > 0 && !isSpace(attrs[p-1]) {
			continue
		}
		q := i
		for q < len(attrs) && isSpace(attrs[q]) {
			q++
		}
		if q >= len(attrs) || attrs[q] != '=' {
			continue
		}
		q++
		for q < len(attrs) && isSpace(attrs[q]) {
			q++
		}
		if q >= len(attrs) || (attrs[q] != '"' && attrs[q] != '\'') {
			return "", false
		}
		end := bytes.IndexByte(attrs[q+1:], attrs[q])
		if end < 0 {
			return "", false
		}
		return string(attrs[q+1 : q+1+end]), true
	}
	return "", false
}

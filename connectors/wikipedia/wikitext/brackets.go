package wikitext

import (
	"slices"
	"strings"
)

const (
	kindTemplate = iota
	kindTable
	kindLink
	nKinds
)

type opener struct {
	kind  int
	start int
	count int // braces still open, for templates ({{{ }}} parameters open 3)
	pipe  int // first '|' directly inside a link, or -1
}

type span struct{ start, end int }

// bracketPass matches {{ }}, {| |} and [[ ]] with one stack, so that the three kinds nest in
// each other the way they do in articles (links in template arguments, templates in file
// captions, tables in infoboxes). A closer pops any opener of another kind above its match:
// those are unclosed. Everything the pass decides is a deletion of a byte range.
type bracketPass struct {
	s        string
	stack    []opener
	counts   [nKinds]int
	dels     []span
	unclosed []span // start of an unclosed template or table, and where it was given up
	ns       *Namespaces
}

// dropBrackets removes templates and tables, and reduces links to their visible text.
func dropBrackets(s string, ns *Namespaces) string {
	if !strings.ContainsAny(s, "{}[]") {
		return s
	}
	p := &bracketPass{s: s, ns: ns}
	p.scan()
	return p.render()
}

func runLen(s string, i int, c byte) int {
	n := 0
	for i+n < len(s) && s[i+n] == c {
		n++
	}
	return n
}

// atLineStart reports whether only spaces, tabs and ':' indentation precede s[i] on its line:
// that is where MediaWiki recognises {| and |}.
func atLineStart(s string, i int) bool {
	for i--; i >= 0; i-- {
		switch s[i] {
		case '\n':
			return true
		case ' ', '\t', ':':
		default:
			return false
		}
	}
	return true
}

func (p *bracketPass) push(o opener) {
	p.stack = append(p.stack, o)
	p.counts[o.kind]++
}

func (p *bracketPass) pop() opener {
	o := p.stack[len(p.stack)-1]
	p.stack = p.stack[:len(p.stack)-1]
	p.counts[o.kind]--
	return o
}

func (p *bracketPass) del(start, end int) {
	if end > start {
		p.dels = append(p.dels, span{start, end})
	}
}

// giveUp records an opener that will never be closed.
func (p *bracketPass) giveUp(o opener, limit int) {
	if o.kind == kindLink {
		p.del(o.start, o.start+2)
		return
	}
	p.unclosed = append(p.unclosed, span{o.start, limit})
}

// popUntil pops openers above the nearest one of kind k; the caller knows there is one.
func (p *bracketPass) popUntil(k, limit int) {
	for p.stack[len(p.stack)-1].kind != k {
		p.giveUp(p.pop(), limit)
	}
}

func (p *bracketPass) scan() {
	s := p.s
	for i := 0; i < len(s); {
		j := strings.IndexAny(s[i:], "{}[]|")
		if j < 0 {
			break
		}
		i += j
		switch s[i] {
		case '{':
			if n := runLen(s, i, '{'); n >= 2 {
				p.push(opener{kind: kindTemplate, start: i, count: n, pipe: -1})
				i += n
				continue
			}
			if i+1 < len(s) && s[i+1] == '|' && atLineStart(s, i) {
				p.push(opener{kind: kindTable, start: i, pipe: -1})
				i += 2
				continue
			}
		case '}':
			if m := runLen(s, i, '}'); m >= 2 {
				p.closeBraces(i, m)
				i += m
				continue
			}
		case '|':
			if i+1 < len(s) && s[i+1] == '}' && p.counts[kindTable] > 0 && atLineStart(s, i) {
				p.popUntil(kindTable, i)
				o := p.pop()
				p.del(o.start, i+2)
				i += 2
				continue
			}
			if i+1 < len(s) && s[i+1] == '}' && (i+2 >= len(s) || s[i+2] != '}') && atLineStart(s, i) {
				p.del(i, i+2) // a stray table end; "|}}" is left alone, it ends a template
				i += 2
				continue
			}
			if n := len(p.stack); n > 0 && p.stack[n-1].kind == kindLink && p.stack[n-1].pipe < 0 {
				p.stack[n-1].pipe = i
			}
		case '[':
			if n := runLen(s, i, '['); n >= 2 {
				p.push(opener{kind: kindLink, start: i + n - 2, pipe: -1})
				i += n
				continue
			}
		case ']':
			if runLen(s, i, ']') >= 2 {
				if p.counts[kindLink] == 0 {
					p.del(i, i+2)
				} else {
					p.popUntil(kindLink, i)
					p.link(p.pop(), i+2)
				}
				i += 2
				continue
			}
		}
		i++
	}
	for len(p.stack) > 0 {
		p.giveUp(p.pop(), len(s))
	}
}

// closeBraces matches a run of m closing braces at i against open templates; braces left over
// are stray and deleted.
func (p *bracketPass) closeBraces(i, m int) {
	used := 0
	for m-used >= 2 && p.counts[kindTemplate] > 0 {
		p.popUntil(kindTemplate, i)
		top := &p.stack[len(p.stack)-1]
		c := min(top.count, m-used)
		top.count -= c
		used += c
		p.del(top.start, i+used)
		if top.count < 2 {
			p.pop()
		}
	}
	p.del(i+used, i+m)
}

// link handles a matched [[...]] spanning [o.start, end).
func (p *bracketPass) link(o opener, end int) {
	s := p.s
	inner := end - 2
	tEnd := inner
	if o.pipe >= 0 {
		tEnd = o.pipe
	}
	target := s[o.start+2 : tEnd]
	lead := len(target) - len(strings.TrimLeft(target, " \t"))
	colon := lead < len(target) && target[lead] == ':'
	if !colon && p.dropLink(target, o.pipe >= 0) {
		p.del(o.start, end)
		return
	}
	if o.pipe >= 0 && strings.TrimSpace(s[o.pipe+1:inner]) != "" {
		p.del(o.start, o.pipe+1)
		p.del(inner, end)
		return
	}
	// [[target]], or the pipe trick [[target|]] which shows the target.
	skip := o.start + 2
	if colon {
		skip += lead + 1
	}
	p.del(o.start, skip)
	p.del(tEnd, end)
}

// dropLink decides whether a link with this target is dropped whole: files, media and
// categories under any of the wiki's names for them, and (when unpiped) interlanguage links
// like [[de:Foo]].
func (p *bracketPass) dropLink(target string, piped bool) bool {
	// Editors paste URL paths ("[[/wiki/File:x.webm|thumb|...]]"); the options of such a file
	// link would otherwise be left as text.
	target = strings.TrimPrefix(strings.TrimSpace(target), "/wiki/")
	i := strings.IndexByte(target, ':')
	if i <= 0 {
		return false
	}
	prefix := strings.TrimSpace(target[:i])
	if key, ok := p.ns.Lookup(prefix); ok {
		return dropsWhole(key)
	}
	return !piped && isLangCode(prefix)
}

// isLangCode matches lower-case wiki language codes: "de", "fat", "zh-min-nan", "simple".
func isLangCode(p string) bool {
	if p == "simple" {
		return true
	}
	parts := strings.Split(p, "-")
	if len(parts[0]) < 2 || len(parts[0]) > 3 {
		return false
	}
	for k, part := range parts {
		if part == "" {
			return false
		}
		for i := 0; i < len(part); i++ {
			if c := part[i]; !(c >= 'a' && c <= 'z' || k > 0 && c >= '0' && c <= '9') {
				return false
			}
		}
	}
	return true
}

func (p *bracketPass) render() string {
	s := p.s
	if len(p.unclosed) > 0 {
		slices.SortFunc(p.unclosed, func(a, b span) int { return a.start - b.start })
		pe := -1
		for _, u := range p.unclosed {
			if pe < u.start {
				pe = paraEnd(s, u.start)
			}
			p.del(u.start, min(pe, u.end))
		}
	}
	if len(p.dels) == 0 {
		return s
	}
	slices.SortFunc(p.dels, func(a, b span) int { return a.start - b.start })
	var b strings.Builder
	b.Grow(len(s))
	pos := 0
	for _, d := range p.dels {
		if d.start > pos {
			b.WriteString(s[pos:d.start])
		}
		pos = max(pos, d.end)
	}
	if pos < len(s) {
		b.WriteString(s[pos:])
	}
	return b.String()
}

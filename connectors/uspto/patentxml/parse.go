// Package patentxml parses one USPTO full-text XML document (grants v2.5 "PATDOC" and v4.x,
// applications pap-v15/v16 and v4.x) into a Patent: bibliographic fields and the plain text of
// the abstract, claims and description.
package patentxml

import (
	"errors"
	"fmt"
	"strings"
)

// Document types.
const (
	Grant       = "grant"
	Application = "application"
)

// Patent is one parsed grant or application. Text sections are lists of lines: one paragraph,
// heading, claim (sub-)clause or table row each, in document order.
type Patent struct {
	DocID             string // Country + DocNumber + Kind, e.g. "US07272630B2"
	Country           string
	DocNumber         string
	Kind              string
	Title             string
	PublicationDate   string // YYYYMMDD as published
	ApplicationNumber string
	FilingDate        string
	CPC               []string
	IPC               []string
	DTDVersion        string
	DocType           string // Grant or Application
	Abstract          []string
	Claims            []string
	Description       []string
	// UnknownEntities counts named entity references that were dropped.
	UnknownEntities int
}

// ErrNotPatent is matched (errors.Is) by a *NotPatentError.
var ErrNotPatent = errors.New("not a patent document")

// NotPatentError is returned for a well-formed document that is not a grant or application,
// such as the sequence listings (sequence-cwu) interleaved in the weekly grant files.
type NotPatentError struct{ Root string }

func (e *NotPatentError) Error() string { return "not a patent document: root <" + e.Root + ">" }

func (e *NotPatentError) Is(target error) bool { return target == ErrNotPatent }

// Reason is the skip reason for source statistics.
func (e *NotPatentError) Reason() string {
	if e.Root == "sequence-cwu" {
		return "sequence-listing"
	}
	return "not-patent:" + e.Root
}

// ParseDocument parses one document. On error the returned Patent holds what was found before
// the problem (often the DocID), so that the caller can name the bad input.
func ParseDocument(data []byte) (Patent, error) {
	t, scanErr := scan(data)
	var p Patent
	if t.root == nil {
		return p, scanErr
	}
	p.UnknownEntities = t.unknown
	switch t.root.name {
	case "us-patent-grant":
		p.DocType = Grant
		parseV4(&p, t, "us-bibliographic-data-grant")
	case "us-patent-application":
		p.DocType = Application
		parseV4(&p, t, "us-bibliographic-data-application")
	case "patdoc":
		p.DocType = Grant
		parseV25(&p, t)
	case "patent-application-publication":
		p.DocType = Application
		parsePAP(&p, t)
	default:
		if scanErr != nil {
			return p, scanErr
		}
		return p, &NotPatentError{Root: t.root.name}
	}
	idErr := p.setID()
	if scanErr != nil {
		return p, scanErr
	}
	return p, idErr
}

func (p *Patent) setID() error {
	if p.Country == "" {
		p.Country = "US" // pap-v15/v16 publish no country: they are US-only
	}
	if p.DocNumber == "" {
		return errors.New("no publication document number")
	}
	if p.Kind == "" {
		return errors.New("no kind code")
	}
	if p.PublicationDate == "" {
		return errors.New("no publication date")
	}
	for _, s := range []string{p.Country, p.DocNumber, p.Kind} {
		if !alnum(s) {
			return fmt.Errorf("malformed publication reference %q %q %q", p.Country, p.DocNumber, p.Kind)
		}
	}
	if p.DocType == Grant {
		p.DocNumber = padGrantNumber(p.DocNumber)
	}
	p.DocID = p.Country + p.DocNumber + p.Kind
	return nil
}

func alnum(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return s != ""
}

// padGrantNumber pads a grant number to the 8 characters the bulk files and USPTO file names
// use ("D584295" -> "D0584295", "6530116" -> "06530116"), so that a patent gets one ID whether
// a format wrote the zeros or not. Application numbers (YYYY + 7 digits) are already fixed-width.
func padGrantNumber(s string) string {
	if len(s) >= 8 {
		return s
	}
	k := 0
	for k < len(s) && s[k] >= 'A' && s[k] <= 'Z' {
		k++
	}
	return s[:k] + strings.Repeat("0", 8-len(s)) + s[k:]
}

func parseV4(p *Patent, t *tree, biblioName string) {
	root := t.root
	p.DTDVersion = root.attrs["dtd-version"]
	if p.DTDVersion == "" {
		p.DTDVersion = dtdFromDoctype(t.doctype)
	}
	bib := child(root, biblioName)
	if pub := path(bib, "publication-reference", "document-id"); pub != nil {
		p.Country = flat(child(pub, "country"))
		p.DocNumber = flat(child(pub, "doc-number"))
		p.Kind = flat(child(pub, "kind"))
		p.PublicationDate = flat(child(pub, "date"))
	}
	if app := path(bib, "application-reference", "document-id"); app != nil {
		p.ApplicationNumber = flat(child(app, "doc-number"))
		p.FilingDate = flat(child(app, "date"))
	}
	p.Title = flat(child(bib, "invention-title"))
	for _, c := range all(child(bib, "classifications-ipcr"), "classification-ipcr") {
		p.IPC = appendUniq(p.IPC, classSymbol(c))
	}
	if ipc := child(bib, "classification-ipc"); ipc != nil {
		for _, k := range ipc.kids {
			if k.name == "main-classification" || k.name == "further-classification" {
				p.IPC = appendUniq(p.IPC, flat(k))
			}
		}
	}
	for _, c := range all(child(bib, "classifications-cpc"), "classification-cpc") {
		p.CPC = appendUniq(p.CPC, classSymbol(c))
	}
	for _, k := range root.kids {
		switch k.name {
		case "abstract":
			p.Abstract = append(p.Abstract, render(k, false)...)
		case "claims":
			p.Claims = append(p.Claims, render(k, true)...)
		case "description":
			p.Description = append(p.Description, render(k, false)...)
		}
	}
}

// classSymbol writes an IPCR/CPC element as the usual symbol, e.g. "B60L 11/1809".
func classSymbol(c *node) string {
	s := flat(child(c, "section")) + flat(child(c, "class")) + flat(child(c, "subclass"))
	g, sg := flat(child(c, "main-group")), flat(child(c, "subgroup"))
	if g != "" || sg != "" {
		s += " " + g + "/" + sg
	}
	return s
}

// parseV25 reads the PATDOC grant format (2001-2004), whose tags are WIPO ST.32 codes.
func parseV25(p *Patent, t *tree) {
	root := t.root
	p.DTDVersion = root.attrs["dtd"]
	if p.DTDVersion == "" {
		p.DTDVersion = dtdFromDoctype(t.doctype)
	}
	bib := child(root, "sdobi")
	b100 := child(bib, "b100")
	p.DocNumber = flat(child(b100, "b110"))
	p.Kind = flat(child(b100, "b130"))
	p.PublicationDate = flat(child(b100, "b140"))
	p.Country = flat(child(b100, "b190"))
	b200 := child(bib, "b200")
	p.ApplicationNumber = flat(child(b200, "b210"))
	p.FilingDate = flat(child(b200, "b220"))
	b500 := child(bib, "b500")
	p.Title = flat(child(b500, "b540"))
	if b510 := child(b500, "b510"); b510 != nil {
		for _, k := range b510.kids {
			if k.name == "b511" || k.name == "b512" {
				p.IPC = appendUniq(p.IPC, flat(k))
			}
		}
	}
	for _, k := range root.kids {
		switch k.name {
		case "sdoab":
			p.Abstract = append(p.Abstract, render(k, false)...)
		case "sdocl":
			p.Claims = append(p.Claims, render(k, true)...)
		case "sdode":
			p.Description = append(p.Description, render(k, false)...)
		}
	}
}

// parsePAP reads the pre-2005 application format (pap-v15, pap-v16).
func parsePAP(p *Patent, t *tree) {
	root := t.root
	p.DTDVersion = dtdFromDoctype(t.doctype)
	bib := child(root, "subdoc-bibliographic-information")
	if id := child(bib, "document-id"); id != nil {
		p.DocNumber = flat(child(id, "doc-number"))
		p.Kind = flat(child(id, "kind-code"))
		p.PublicationDate = flat(child(id, "document-date"))
		p.Country = flat(child(id, "country-code"))
	}
	if dom := child(bib, "domestic-filing-data"); dom != nil {
		p.ApplicationNumber = flat(path(dom, "application-number", "doc-number"))
		p.FilingDate = flat(child(dom, "filing-date"))
	}
	tech := child(bib, "technical-information")
	p.Title = flat(child(tech, "title-of-invention"))
	if ipc := child(tech, "classification-ipc"); ipc != nil {
		for _, k := range ipc.kids {
			if k.name == "classification-ipc-primary" || k.name == "classification-ipc-secondary" {
				for _, c := range all(k, "ipc") {
					p.IPC = appendUniq(p.IPC, flat(c))
				}
			}
		}
	}
	for _, k := range root.kids {
		switch k.name {
		case "subdoc-abstract":
			p.Abstract = append(p.Abstract, render(k, false)...)
		case "subdoc-claims":
			p.Claims = append(p.Claims, render(k, true)...)
		case "subdoc-description":
			p.Description = append(p.Description, render(k, false)...)
		}
	}
}

// dtdFromDoctype takes the system identifier: `<!DOCTYPE x SYSTEM "pap-v16-2002-01-01.dtd"`
// gives "pap-v16-2002-01-01".
func dtdFromDoctype(d string) string {
	i := strings.IndexAny(d, `"'`)
	if i < 0 {
		return ""
	}
	rest := d[i+1:]
	j := strings.IndexByte(rest, d[i])
	if j < 0 {
		return ""
	}
	return strings.TrimSuffix(rest[:j], ".dtd")
}

func appendUniq(list []string, s string) []string {
	if s == "" {
		return list
	}
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}

func child(n *node, name string) *node {
	if n == nil {
		return nil
	}
	for _, k := range n.kids {
		if k.name == name {
			return k
		}
	}
	return nil
}

func path(n *node, names ...string) *node {
	for _, name := range names {
		n = child(n, name)
	}
	return n
}

// all returns the descendants named name, in document order, without descending into them.
func all(n *node, name string) []*node {
	if n == nil {
		return nil
	}
	var out []*node
	var walk func(*node)
	walk = func(n *node) {
		for _, k := range n.kids {
			if k.name == name {
				out = append(out, k)
			} else if k.name != "" {
				walk(k)
			}
		}
	}
	walk(n)
	return out
}

package main

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"unicode/utf8"
)

// doc is one line of a domain's JSONL corpus: what the pipeline's jsonl source reads.
type doc struct {
	ID   string `json:"id"`
	Text string `json:"text"`
}

// corpusStats is what corpora.json says of one domain.
type corpusStats struct {
	Domain   string `json:"domain"`
	Source   string `json:"source"`
	Read     int    `json:"read"`
	Short    int    `json:"short"`
	Long     int    `json:"long"`
	InRange  int    `json:"in_range"`
	Kept     int    `json:"kept"`
	MinChars int    `json:"min_chars"`
	MaxChars int    `json:"max_chars"`
}

// readTree reads every regular file under root whose name ends in one of exts (a ".gz" copy is
// read through gunzip), keyed by its slash path relative to root without the ".gz".
func readTree(root string, exts ...string) ([]doc, error) {
	var out []doc
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		name := strings.TrimSuffix(p, ".gz")
		ok := false
		for _, e := range exts {
			ok = ok || strings.HasSuffix(strings.ToLower(name), e)
		}
		if !ok {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		var r io.Reader = f
		if strings.HasSuffix(p, ".gz") {
			zr, err := gzip.NewReader(f)
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			r = zr
		}
		b, err := io.ReadAll(r)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		rel, _ := filepath.Rel(root, name)
		out = append(out, doc{ID: filepath.ToSlash(rel), Text: strings.ToValidUTF8(string(b), "\uFFFD")})
		return nil
	})
	return out, err
}

var chapterHead = regexp.MustCompile(`^([1-3] )?[A-Z][A-Za-z ]+ [0-9]+$`)
var verseStart = regexp.MustCompile(`^ *[0-9]+ `)

// readBible splits the `bible` program's output of the whole KJV into chapters: a chapter starts
// at a "Book N" line; each verse becomes one line, its number dropped and its wrapped lines
// joined. The heading itself is left out of the text (it would name the chapter in one half).
func readBible(path string) ([]doc, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []doc
	var id string
	var verses []string
	flush := func() {
		if id != "" && len(verses) > 0 {
			out = append(out, doc{ID: id, Text: strings.Join(verses, "\n")})
		}
		verses = nil
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), " \t")
		switch {
		case line == "":
		case chapterHead.MatchString(line):
			flush()
			id = line
		case verseStart.MatchString(line):
			verses = append(verses, strings.TrimSpace(verseStart.ReplaceAllString(line, "")))
		case len(verses) > 0:
			verses[len(verses)-1] += " " + strings.TrimSpace(line)
		}
	}
	flush()
	return out, sc.Err()
}

// keep applies the length range and takes up to max documents in the order of a hash of their
// ids (a sample that does not depend on file order), then sorts them by id.
func keep(docs []doc, st *corpusStats, max int) []doc {
	var in []doc
	st.Read = len(docs)
	for _, d := range docs {
		n := utf8.RuneCountInString(strings.TrimSpace(d.Text))
		switch {
		case n < st.MinChars:
			st.Short++
		case n > st.MaxChars:
			st.Long++
		default:
			in = append(in, d)
		}
	}
	st.InRange = len(in)
	h := func(s string) uint64 { f := fnv.New64a(); f.Write([]byte(s)); return f.Sum64() }
	sort.Slice(in, func(i, j int) bool { return h(in[i].ID) < h(in[j].ID) })
	if len(in) > max {
		in = in[:max]
	}
	sort.Slice(in, func(i, j int) bool { return in[i].ID < in[j].ID })
	st.Kept = len(in)
	return in
}

func writeJSONL(path string, docs []doc) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, d := range docs {
		if err := enc.Encode(d); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

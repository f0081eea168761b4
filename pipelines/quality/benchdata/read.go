package benchdata

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/connectors/uspto"
	"github.com/reignpipe/reignpipe/pipelines/components"
	"github.com/reignpipe/reignpipe/pipelines/registry"
	"github.com/reignpipe/reignpipe/schemas"
)

// doc is the part of a source document a construction uses. group names the documents that
// are publications of one work (a USPTO application number, shared by the application and its
// grant); "" for none.
type doc struct {
	id, version, group, text string
}

// docSet keeps one document per id, in first-seen order.
type docSet struct {
	order []string
	byID  map[string]doc
	dups  int
}

func newDocSet() *docSet { return &docSet{byID: map[string]doc{}} }

// add keeps the greatest Version, the later on a tie: what a sink keyed by id would hold.
func (s *docSet) add(d doc) {
	old, seen := s.byID[d.id]
	if !seen {
		s.order = append(s.order, d.id)
		s.byID[d.id] = d
		return
	}
	s.dups++
	if d.version >= old.version {
		s.byID[d.id] = d
	}
}

// openSource opens a source type of the component registry, reading every file of input once;
// sections applies to USPTO only (nil = its default).
func openSource(ctx context.Context, source, input string, sections []string) (connectors.Source, error) {
	typ, ok := components.Builtin().Source(source)
	if !ok {
		return nil, fmt.Errorf("benchdata: source %q is not a connector", source)
	}
	c := registry.SourceConfig{Type: source, Path: input}
	if u, ok := typ.Settings(c).(*components.USPTOConfig); ok {
		u.Text.Sections = sections
		c.Settings = u
	}
	return typ.Open(ctx, c)
}

// readAll reads a source to its end into a docSet. Inputs the source cannot decode are
// counted as "bad-input" and passed over, as the pipeline's dead-letter path would.
func readAll(ctx context.Context, source, input string, sections []string) (*docSet, Pass, error) {
	pass := Pass{Sections: sections, Skipped: map[string]int64{}}
	set := newDocSet()
	if source == SourceTextDir {
		err := readTextDir(ctx, input, func(d doc) { pass.Read++; set.add(d) })
		return set, pass, err
	}
	src, err := openSource(ctx, source, input, sections)
	if err != nil {
		return nil, pass, err
	}
	defer src.Close(ctx)
	var bad int64
	for {
		d, ack, err := src.Read(ctx)
		var badInput *connectors.BadInputError
		if errors.As(err, &badInput) {
			bad++
			if ack != nil {
				if err := ack(ctx, err); err != nil {
					return nil, pass, err
				}
			}
			continue
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, pass, fmt.Errorf("benchdata: reading %s: %w", input, err)
		}
		set.add(fromDocument(d))
		if ack != nil {
			if err := ack(ctx, nil); err != nil {
				return nil, pass, err
			}
		}
	}
	st := src.Stats()
	pass.Read = st.Read
	for k, v := range st.Skipped {
		pass.Skipped[k] += v
	}
	if bad > 0 {
		pass.Skipped["bad-input"] += bad
	}
	return set, pass, nil
}

func fromDocument(d schemas.Document) doc {
	out := doc{id: d.ID, version: d.Version, text: d.Text}
	if d.Source == uspto.Source && d.Meta["application_number"] != "" {
		out.group = d.Meta["country"] + d.Meta["application_number"]
	}
	return out
}

// readTextDir calls fn for every regular *.rst and *.txt file under dir, in lexical path
// order, with the slash-separated path relative to dir as id. Symbolic links are not
// followed, so a link cannot bring in a file twice or leave the tree. Invalid UTF-8 is
// replaced by U+FFFD here so that character counts match the JSON that is written.
func readTextDir(ctx context.Context, dir string, fn func(doc)) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("benchdata: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("benchdata: textdir input %s is not a directory", dir)
	}
	n := 0
	err = filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if !e.Type().IsRegular() {
			return nil
		}
		ext := strings.ToLower(filepath.Ext(p))
		if ext != ".rst" && ext != ".txt" {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		text := string(b)
		if !utf8.ValidString(text) {
			text = strings.ToValidUTF8(text, "\uFFFD")
		}
		n++
		fn(doc{id: filepath.ToSlash(rel), text: text})
		return nil
	})
	if err != nil {
		return fmt.Errorf("benchdata: %w", err)
	}
	if n == 0 {
		return fmt.Errorf("benchdata: no *.rst or *.txt file under %s", dir)
	}
	return nil
}

// validID reports whether id survives a qrels row unchanged: eval splits rows on tabs and
// trims the fields.
func validID(id string) bool {
	return id != "" && !strings.ContainsAny(id, "\t\r\n") && strings.TrimSpace(id) == id
}

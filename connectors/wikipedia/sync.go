package wikipedia

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/connectors/wikipedia/pageset"
	"github.com/reignpipe/reignpipe/internal/atomicfile"
	"github.com/reignpipe/reignpipe/schemas"
)

// With Options.DeleteMissing the reader keeps the articles of a dump's last complete read and
// hands out, after the pages of a newer dump read as completely, a deletion record for each
// article that dump no longer has (deleted, now a redirect, moved out of the namespaces read,
// or left with no text to embed). A page the read could not parse is kept (a failure is not an
// absence); a read that lost a stream, or met a page it could not identify, deletes nothing.
//
// The sets are page id + revision id files sorted by id (package pageset), built during the
// read with an external sort and compared by a merge, so memory stays bounded at any dump's
// size. Every read starts from the first page, also when the runner resumes mid-dump (it
// reads the committed inputs again and skips them), so each read sees the whole dump. With
// P = Options.ArticlesPath:
//
//  1. while reading, every article's id and revision go to P.read (runs P.read.spill-<n>);
//  2. at the end of the dump, a P.next left by an earlier read whose deletions were not all
//     acked is folded into P (P := P ∪ P.next, by id, newest revision): a superset of what
//     may be stored downstream is always a safe set to compare with, it never deletes a page
//     the dump has and never forgets one it lost;
//  3. a read that lost a stream folds P.read into P the same way (its pages are downstream
//     too, so a later complete read can delete them), counts the articles of P it did not hand
//     out (docs_skipped.deletion_withheld: those a complete read would delete, and the lost
//     streams' among them) and logs why it deleted nothing;
//  4. a complete read renames P.read to P.next, then hands out a deletion record for every
//     page of P not in P.next, in page id order -- the same records in the same order when
//     the same dump is read again, so a resumed run skips exactly the committed ones -- at the
//     page's revision in P: the version its vector was stored at, which the deletion removes,
//     while a later revision of a page that comes back is newer and brings it back;
//  5. once the dump's end was reached and every deletion record is acked without error
//     (durable in every output), P.next is renamed over P. A first read (no P) renames it at
//     once: nothing to compare with, nothing deleted.
//
// A crash anywhere leaves P, P.next or both as one of these steps wrote them (every write is
// temp file, fsync, rename), and the next complete read derives every deletion not yet durable
// again from them (step 2), while no page of the new dump is ever deleted.

// spillPages is how many pages a read holds in memory before spilling a sorted run (16 bytes
// each: 16 MiB); a variable so that tests spill.
var spillPages = 1 << 20

const (
	nextSuffix = ".next"
	readSuffix = ".read"
	// withheldKey counts, in the run summary's docs_skipped, the kept articles a read with a
	// lost stream did not hand out and so did not delete.
	withheldKey = "deletion_withheld"
)

// syncer is a Reader's article bookkeeping. Its read side runs on Read's goroutine; acks may
// come from any goroutine, and mu guards what they touch.
type syncer struct {
	path  string // P
	build *pageset.Builder
	lost  string // why this read is not complete; "" while it is
	ended bool   // the dump's end was reached and its set built
	diff  *pageset.Diff

	mu        sync.Mutex
	handed    int64
	acked     int64
	refused   bool // a deletion came back with an error: P.next is not installed
	exhausted bool
	installed bool
}

func newSyncer(path string) (*syncer, error) {
	// Runs of a read that was interrupted: that read is done over from the start.
	if err := pageset.RemoveSpills(path + readSuffix); err != nil {
		return nil, fmt.Errorf("wikipedia: %w", err)
	}
	return &syncer{path: path, build: pageset.NewBuilder(path+readSuffix, spillPages)}, nil
}

// saw records one item Read hands out, in file order. After a loss it goes on recording the
// rest, to be folded into the kept set (step 3).
func (s *syncer) saw(base string, ordinal int64, it item) error {
	id, err := strconv.ParseUint(it.pageID, 10, 64)
	why := ""
	switch {
	case it.lost:
		// The stream is gone: whether its pages are articles nobody can tell (the index
		// lists redirects and other namespaces too), so they are not recorded either.
		why = it.bad.Error()
	case err != nil:
		why = fmt.Sprintf("%s page %d could not be identified (%v)", base, ordinal, it.bad)
	}
	if why != "" {
		if s.lost == "" {
			s.lost = why
		}
		return nil
	}
	var rev uint64
	if it.bad == nil {
		if rev, err = strconv.ParseUint(it.doc.Version, 10, 64); err != nil {
			return fmt.Errorf("wikipedia: page %s: revision %q", it.pageID, it.doc.Version)
		}
	}
	return s.build.Add(pageset.Page{ID: id, Rev: rev})
}

// next is Read at the dump's end: the next deletion record, or io.EOF.
func (s *syncer) next(r *Reader) (schemas.Document, connectors.AckFunc, error) {
	if !s.ended {
		s.ended = true
		if err := s.end(r); err != nil {
			return schemas.Document{}, nil, err
		}
	}
	if s.diff == nil {
		return schemas.Document{}, nil, io.EOF
	}
	p, ok, err := s.diff.Next()
	if err != nil {
		return schemas.Document{}, nil, fmt.Errorf("wikipedia: comparing with the last complete read: %w", err)
	}
	if !ok {
		err := s.diff.Close()
		s.diff = nil
		s.mu.Lock()
		s.exhausted = true
		s.mu.Unlock()
		if err := errors.Join(err, s.install()); err != nil {
			return schemas.Document{}, nil, err
		}
		return schemas.Document{}, nil, io.EOF
	}
	s.mu.Lock()
	s.handed++
	s.mu.Unlock()
	version := ""
	if p.Rev > 0 {
		version = strconv.FormatUint(p.Rev, 10)
	}
	id := strconv.FormatUint(p.ID, 10)
	d := schemas.Document{ID: r.source + ":" + id, Source: r.source, Version: version, Deleted: true,
		Position: fmt.Sprintf("%s: page %s, an article in the last complete read, is not one in this dump", r.base, id)}
	return d, s.ack, nil
}

// end builds this read's set and either folds it into P (a read that lost a stream) or makes
// it P.next and starts the comparison.
func (s *syncer) end(r *Reader) error {
	if r.source == "" {
		r.source = r.fileSource
	}
	read, next, label := s.path+readSuffix, s.path+nextSuffix, r.source
	n, err := s.build.Finish(label)
	if err != nil {
		return fmt.Errorf("wikipedia: writing the article set: %w", err)
	}
	had, err := s.previous(label)
	if err != nil {
		return err
	}
	if s.lost != "" {
		withheld := int64(0)
		if had {
			if withheld, err = count(s.path, read); err != nil {
				return err
			}
		}
		if _, err := pageset.Union(s.path, label, s.path, read); err != nil {
			return fmt.Errorf("wikipedia: %w", err)
		}
		r.mu.Lock()
		r.skipped[withheldKey] += withheld
		r.mu.Unlock()
		slog.Warn("wikipedia: source.delete_missing: the dump was not read whole, so no page is deleted; its articles are kept for the next complete read to compare with",
			"dump", r.base, "articles_not_read_not_deleted", withheld, "why", s.lost)
		return remove(read)
	}
	if err := rename(read, next); err != nil {
		return err
	}
	if !had {
		slog.Info("wikipedia: source.delete_missing: first complete read, nothing to compare with; its articles are kept for the next dump", "dump", r.base, "articles", n)
		s.mu.Lock()
		s.installed = true
		s.mu.Unlock()
		return rename(next, s.path)
	}
	if s.diff, err = pageset.NewDiff(s.path, next); err != nil {
		return fmt.Errorf("wikipedia: %w", err)
	}
	return nil
}

// previous readies P to compare with: an earlier read's P.next folded in, a set of another
// wiki (source.name changed) set aside. It says whether there is one.
func (s *syncer) previous(label string) (bool, error) {
	next := s.path + nextSuffix
	for _, p := range []string{s.path, next} {
		got, err := labelOf(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("wikipedia: %w", err)
		}
		if got != label {
			slog.Warn("wikipedia: source.delete_missing: the kept article set is of another source name; this read compares with nothing", "set", p, "set_source", got, "source", label)
			if err := remove(p); err != nil {
				return false, err
			}
		}
	}
	if _, err := os.Stat(next); err == nil {
		if _, err := pageset.Union(s.path, label, s.path, next); err != nil {
			return false, fmt.Errorf("wikipedia: folding in an unfinished read's articles: %w", err)
		}
		if err := remove(next); err != nil {
			return false, err
		}
	}
	_, err := os.Stat(s.path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// ack counts a deletion record's ack; the last one, after the dump's end, installs P.next.
func (s *syncer) ack(_ context.Context, err error) error {
	s.mu.Lock()
	s.acked++
	if err != nil {
		s.refused = true
	}
	s.mu.Unlock()
	return s.install()
}

// install renames P.next over P once every deletion record derived from it is acked.
func (s *syncer) install() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.installed || s.refused || !s.exhausted || s.acked < s.handed {
		return nil
	}
	s.installed = true
	return rename(s.path+nextSuffix, s.path)
}

// close releases the comparison and the runs of a read that did not reach the dump's end.
func (s *syncer) close() {
	if s.diff != nil {
		s.diff.Close()
		s.diff = nil
	}
	if !s.ended {
		s.build.Remove()
	}
}

func labelOf(path string) (string, error) {
	r, err := pageset.Open(path)
	if err != nil {
		return "", err
	}
	defer r.Close()
	return r.Label(), nil
}

// count is how many pages of old the set at new lacks.
func count(old, new string) (int64, error) {
	d, err := pageset.NewDiff(old, new)
	if err != nil {
		return 0, fmt.Errorf("wikipedia: %w", err)
	}
	defer d.Close()
	var n int64
	for {
		_, ok, err := d.Next()
		if err != nil || !ok {
			return n, err
		}
		n++
	}
}

func rename(from, to string) error {
	if err := atomicfile.Rename(from, to); err != nil {
		return fmt.Errorf("wikipedia: keeping the article set: %w", err)
	}
	return nil
}

func remove(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("wikipedia: %w", err)
	}
	return nil
}

package wikipedia

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/dsnet/compress/bzip2"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/connectors/wikipedia/exportxml"
	"github.com/reignpipe/reignpipe/connectors/wikipedia/pageset"
	"github.com/reignpipe/reignpipe/connectors/wikipedia/wikitest"
	"github.com/reignpipe/reignpipe/internal/testenv"
	"github.com/reignpipe/reignpipe/schemas"
)

// syncText is an article's text, different for every page so that none is empty.
func syncText(id int) string {
	return strings.Repeat(fmt.Sprintf("Page %d is about town %d on river %d. ", id, id*3, id*7), 4)
}

// monthOne is the older dump: articles 100-119 at revision 5000+id, a redirect and a project
// page (neither an article).
func monthOne() []string {
	var pages []string
	for id := 100; id < 120; id++ {
		pages = append(pages, wikitest.Page(id, 0, 5000+id, fmt.Sprintf("Town %d", id), syncText(id), false))
	}
	return append(pages,
		wikitest.Page(130, 0, 5130, "Old name", "#REDIRECT [[Town 101]]", true),
		wikitest.Page(131, 4, 5131, "Wikipedia:About", "Project page text here.", false))
}

// monthTwo is the newer dump, its pages in reverse id order (nothing relies on dumps being in
// page id order): 103 and 111 deleted, 105 and 116 now redirects, 108 moved to the user
// namespace, 113 left with only a template, 101 edited, 118 unreadable (no <text>), 150 new.
// The articles the newer dump lacks are monthTwoGone.
func monthTwo() []string {
	var pages []string
	for id := 100; id < 120; id++ {
		title, text, ns, rev, redirect := fmt.Sprintf("Town %d", id), syncText(id), 0, 5000+id, false
		switch id {
		case 103, 111:
			continue
		case 105, 116:
			text, rev, redirect = "#REDIRECT [[Town 100]]", 7000+id, true
		case 108:
			title, ns, rev = fmt.Sprintf("User:Someone/Town %d", id), 2, 7000+id
		case 113:
			text, rev = "{{Stub}}", 7000+id
		case 101:
			text, rev = syncText(id)+" Edited.", 7000+id
		case 118:
			pages = append(pages, fmt.Sprintf("  <page><title>%s</title><ns>0</ns><id>%d</id><revision><id>%d</id></revision></page>\n", title, id, 7000+id))
			continue
		}
		pages = append(pages, wikitest.Page(id, ns, rev, title, text, redirect))
	}
	pages = append(pages, wikitest.Page(150, 0, 7150, "Town 150", syncText(150), false),
		wikitest.Page(130, 0, 5130, "Old name", "#REDIRECT [[Town 101]]", true))
	slices.Reverse(pages)
	return pages
}

var monthTwoGone = []string{"103", "105", "108", "111", "113", "116"}

// dumpKind writes a dump of pages and says how to read it.
type dumpKind struct {
	name  string
	write func(t *testing.T, dir, name string, pages []string) Options
}

var dumpKinds = []dumpKind{
	{"multistream, 1 worker", func(t *testing.T, dir, name string, pages []string) Options {
		dump, _ := wikitest.WriteMultistream(t, dir, name, siteinfo, pages, 4)
		return Options{Path: dump, Workers: 1}
	}},
	{"multistream, 4 workers", func(t *testing.T, dir, name string, pages []string) Options {
		dump, _ := wikitest.WriteMultistream(t, dir, name, siteinfo, pages, 4)
		return Options{Path: dump, Workers: 4}
	}},
	{"bz2 without index", func(t *testing.T, dir, name string, pages []string) Options {
		return Options{Path: wikitest.WriteFile(t, dir, name+".xml.bz2", wikitest.BZ2(t, siteinfo+strings.Join(pages, "")+footer))}
	}},
}

// syncRead is what one read handed out.
type syncRead struct {
	docs    []string           // article ids (without the source prefix)
	deleted []schemas.Document // deletion records, in order
	acks    []connectors.AckFunc
	stats   connectors.SourceStats
}

// readSync reads a dump to its end as the runner does (bad inputs acked with their error),
// then acks the first ack deletion records (all when ack < 0), as a commit would, and closes.
func readSync(t *testing.T, opts Options, ack int) syncRead {
	t.Helper()
	r, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	var out syncRead
	for {
		d, a, err := r.Read(context.Background())
		var bad *connectors.BadInputError
		switch {
		case err == io.EOF:
		case errors.As(err, &bad):
			a(context.Background(), err)
			continue
		case err != nil:
			t.Fatal(err)
		case d.ID == "" || a == nil:
			t.Fatalf("Read returned a document without an id or ack: %+v", d)
		case d.Deleted:
			out.deleted, out.acks = append(out.deleted, d), append(out.acks, a)
			continue
		default:
			out.docs = append(out.docs, d.ID[strings.IndexByte(d.ID, ':')+1:])
			continue
		}
		break
	}
	if ack < 0 {
		ack = len(out.acks)
	}
	for _, a := range out.acks[:ack] {
		if err := a(context.Background(), nil); err != nil {
			t.Fatalf("ack: %v", err)
		}
	}
	out.stats = r.Stats()
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	return out
}

func deletedIDs(ds []schemas.Document) []string {
	var ids []string
	for _, d := range ds {
		ids = append(ids, strings.TrimPrefix(d.ID, "testwiki:"))
	}
	return ids
}

// stateFiles lists the state folder (article sets, runs).
func stateFiles(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return strings.Join(names, " ")
}

// A first read deletes nothing; a newer dump read whole deletes exactly the articles it lacks
// (deleted, now redirects, moved out of the namespace, left empty), at their revision in the
// older dump; a read that loses a stream deletes nothing and says how many it held back; a
// read whose deletions were not all acked (a crash) is followed by one that hands out the same
// deletions in the same order; once they are acked the newer dump is the one compared with.
// The same on every kind of dump and with a spill every 4 pages.
func TestDeleteMissing(t *testing.T) {
	defer func(n int) { spillPages = n }(spillPages)
	spillPages = 4
	for _, kind := range dumpKinds {
		t.Run(kind.name, func(t *testing.T) {
			dir, state := t.TempDir(), t.TempDir()
			set := filepath.Join(state, "p.wikipedia-articles")
			open := func(name string, pages []string) Options {
				o := kind.write(t, dir, name, pages)
				o.Source, o.DeleteMissing, o.ArticlesPath = "testwiki", true, set
				return o
			}
			one, two := open("one", monthOne()), open("two", monthTwo())

			first := readSync(t, one, -1)
			if len(first.docs) != 20 || len(first.deleted) != 0 {
				t.Fatalf("first read: %d articles, deletions %v", len(first.docs), deletedIDs(first.deleted))
			}
			if got := stateFiles(t, state); got != "p.wikipedia-articles" {
				t.Fatalf("after the first read the state holds %s", got)
			}

			crashed := readSync(t, two, 2)
			if got := fmt.Sprint(deletedIDs(crashed.deleted)); got != fmt.Sprint(monthTwoGone) {
				t.Fatalf("deleted %s, want %s", got, monthTwoGone)
			}
			for _, d := range crashed.deleted {
				id := strings.TrimPrefix(d.ID, "testwiki:")
				if d.Source != "testwiki" || d.Version != "5"+id || d.Title != "" || d.Text != "" || !strings.Contains(d.Position, "page "+id) {
					t.Errorf("deletion record %+v", d)
				}
			}
			if slices.Contains(crashed.docs, "118") || !slices.Contains(crashed.docs, "150") {
				t.Fatalf("articles of the newer dump: %v", crashed.docs)
			}
			if got := stateFiles(t, state); got != "p.wikipedia-articles p.wikipedia-articles.next" {
				t.Fatalf("with deletions unacked the state holds %s", got)
			}

			again := readSync(t, two, -1)
			if !reflect.DeepEqual(again.deleted, crashed.deleted) {
				t.Fatalf("read again: deletions %v, first %v", again.deleted, crashed.deleted)
			}
			if got := stateFiles(t, state); got != "p.wikipedia-articles" {
				t.Fatalf("after every deletion was acked the state holds %s", got)
			}
			if third := readSync(t, two, -1); len(third.deleted) != 0 || !slices.Equal(third.docs, crashed.docs) {
				t.Fatalf("the same dump a third time deleted %v, read %v (first %v)", deletedIDs(third.deleted), third.docs, crashed.docs)
			}

			// Back to the older dump: the newer one's new page (150) is gone from it, at
			// its newer revision; the unreadable 118 was kept, so it is not deleted.
			back := readSync(t, one, -1)
			if got := fmt.Sprint(deletedIDs(back.deleted)); got != "[150]" || back.deleted[0].Version != "7150" {
				t.Fatalf("back to the older dump: deletions %v", back.deleted)
			}
		})
	}
}

// A read that loses a stream deletes nothing, counts what it held back, and keeps its pages
// for the next complete read, which then deletes exactly what it lacks.
func TestDeleteMissingLostStream(t *testing.T) {
	for _, sequential := range []bool{false, true} {
		t.Run(fmt.Sprintf("sequential %v", sequential), func(t *testing.T) {
			dir, state := t.TempDir(), t.TempDir()
			set := filepath.Join(state, "p.wikipedia-articles")
			opts := func(dump string) Options {
				return Options{Path: dump, Source: "testwiki", DeleteMissing: true, ArticlesPath: set, Sequential: sequential}
			}
			one, _ := wikitest.WriteMultistream(t, dir, "one", siteinfo, monthOne(), 4)
			readSync(t, opts(one), -1)

			pages := monthTwo()
			damaged, index := wikitest.WriteMultistream(t, dir, "damaged", siteinfo, pages, 4)
			wikitest.Damage(t, damaged, index, 1) // pages[4:8]
			lost := readSync(t, opts(damaged), -1)
			if len(lost.deleted) != 0 {
				t.Fatalf("a read with a lost stream deleted %v", deletedIDs(lost.deleted))
			}
			// What is held back is every article of the older dump this read did not hand
			// out (some may be in the lost stream: nobody can tell).
			kept := map[string]bool{"118": true} // unreadable, but an article: kept
			for _, p := range pages[4:8] {
				if _, id := exportxml.PageHead([]byte(p)); id == "118" {
					kept["118"] = false
				}
			}
			for _, id := range lost.docs {
				kept[id] = true
			}
			var withheld int64
			for id := 100; id < 120; id++ {
				if !kept[fmt.Sprint(id)] {
					withheld++
				}
			}
			if got := lost.stats.Skipped[withheldKey]; got != withheld {
				t.Fatalf("withheld %d, want %d (skipped %v)", got, withheld, lost.stats.Skipped)
			}
			if got := stateFiles(t, state); got != "p.wikipedia-articles" {
				t.Fatalf("after a read with a lost stream the state holds %s", got)
			}

			two, _ := wikitest.WriteMultistream(t, dir, "two", siteinfo, pages, 4)
			whole := readSync(t, opts(two), -1)
			// The lost read's articles were folded in (the new page 150, if it was read): none
			// is deleted, being in the newer dump.
			if got := fmt.Sprint(deletedIDs(whole.deleted)); got != fmt.Sprint(monthTwoGone) {
				t.Fatalf("the complete read after it deleted %s, want %s", got, monthTwoGone)
			}
		})
	}
}

// The state written by a build is a page set of the source's articles; a set kept under another
// source name is not compared with.
func TestDeleteMissingOtherSource(t *testing.T) {
	dir, state := t.TempDir(), t.TempDir()
	set := filepath.Join(state, "p.wikipedia-articles")
	one, _ := wikitest.WriteMultistream(t, dir, "one", siteinfo, monthOne(), 4)
	two, _ := wikitest.WriteMultistream(t, dir, "two", siteinfo, monthTwo(), 4)
	readSync(t, Options{Path: one, Source: "oldwiki", DeleteMissing: true, ArticlesPath: set}, -1)
	r, err := pageset.Open(set)
	if err != nil {
		t.Fatal(err)
	}
	if r.Label() != "oldwiki" {
		t.Errorf("label %q", r.Label())
	}
	r.Close()
	if got := readSync(t, Options{Path: two, Source: "testwiki", DeleteMissing: true, ArticlesPath: set}, -1); len(got.deleted) != 0 {
		t.Fatalf("compared with another source's set: deleted %v", deletedIDs(got.deleted))
	}
	if got := readSync(t, Options{Path: one, Source: "testwiki", DeleteMissing: true, ArticlesPath: set}, -1); fmt.Sprint(deletedIDs(got.deleted)) != "[150]" {
		t.Fatalf("after it, the older dump deleted %v", deletedIDs(got.deleted))
	}
}

// A read stopped before the dump's end leaves no runs behind and changes nothing kept.
func TestDeleteMissingStoppedRead(t *testing.T) {
	defer func(n int) { spillPages = n }(spillPages)
	spillPages = 2
	dir, state := t.TempDir(), t.TempDir()
	set := filepath.Join(state, "p.wikipedia-articles")
	one, _ := wikitest.WriteMultistream(t, dir, "one", siteinfo, monthOne(), 4)
	two, _ := wikitest.WriteMultistream(t, dir, "two", siteinfo, monthTwo(), 4)
	readSync(t, Options{Path: one, Source: "testwiki", DeleteMissing: true, ArticlesPath: set}, -1)
	r, err := Open(Options{Path: two, Source: "testwiki", DeleteMissing: true, ArticlesPath: set})
	if err != nil {
		t.Fatal(err)
	}
	for range 9 {
		var bad *connectors.BadInputError
		if _, _, err := r.Read(context.Background()); err != nil && !errors.As(err, &bad) {
			t.Fatal(err)
		}
	}
	if got := stateFiles(t, state); !strings.Contains(got, ".spill-") {
		t.Fatalf("no run spilled after 9 pages at 2 a run: %s", got)
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := stateFiles(t, state); got != "p.wikipedia-articles" {
		t.Fatalf("after a stopped read the state holds %s", got)
	}
	if got := readSync(t, Options{Path: two, Source: "testwiki", DeleteMissing: true, ArticlesPath: set}, -1); fmt.Sprint(deletedIDs(got.deleted)) != fmt.Sprint(monthTwoGone) {
		t.Fatalf("deleted %v", deletedIDs(got.deleted))
	}
}

// The same on the real English sample: a newer dump made from it with three articles removed,
// three turned into redirects (at a newer revision) and one moved to a user page deletes exactly
// those seven, each at its revision in the real dump, and nothing else of its 106 articles.
func TestDeleteMissingRealDump(t *testing.T) {
	real := testenv.SharedData(t, "wikipedia/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2")
	dir, state := t.TempDir(), t.TempDir()
	set := filepath.Join(state, "p.wikipedia-articles")
	first := readSync(t, Options{Path: real, DeleteMissing: true, ArticlesPath: set}, -1)
	if len(first.docs) != 106 || len(first.deleted) != 0 {
		t.Fatalf("first read: %d articles, %d deletions", len(first.docs), len(first.deleted))
	}
	f, err := os.Open(real)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	bz, err := bzip2.NewReader(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	xml, err := io.ReadAll(bz)
	if err != nil {
		t.Fatal(err)
	}
	text := string(xml)
	start, end := strings.Index(text, "  <page>"), strings.LastIndex(text, "</page>")+len("</page>\n")
	pages := strings.SplitAfter(text[start:end], "</page>\n")
	pages = pages[:len(pages)-1] // after the last separator: nothing
	change := map[string]string{first.docs[90]: "move"}
	for i := range 3 {
		change[first.docs[3+20*i]] = "remove"
		change[first.docs[60+i]] = "redirect"
	}
	var newer []string
	wantGone := map[string]string{} // id -> revision in the real dump
	for _, p := range pages {
		_, id := exportxml.PageHead([]byte(p))
		ep, err := exportxml.ParsePage([]byte(p))
		if err != nil {
			t.Fatal(err)
		}
		switch change[id] {
		case "remove":
			wantGone[id] = ep.RevID
			continue
		case "redirect":
			wantGone[id] = ep.RevID
			body := p[strings.Index(p, "<text"):]
			p = p[:strings.Index(p, "<text")] + `<text xml:space="preserve">#REDIRECT [[Anarchism]]</text>` + body[strings.Index(body, "</text>")+len("</text>"):]
			p = strings.Replace(p, "<id>"+ep.RevID+"</id>", "<id>9"+ep.RevID+"</id>", 1)
		case "move":
			wantGone[id] = ep.RevID
			p = strings.Replace(strings.Replace(p, "<ns>0</ns>", "<ns>2</ns>", 1), "<title>", "<title>User:Someone/", 1)
		}
		newer = append(newer, p)
	}
	if len(wantGone) != 7 {
		t.Fatalf("%d pages changed, want 7", len(wantGone))
	}
	dump, _ := wikitest.WriteMultistream(t, dir, "enwiki-newer", siteinfo, newer, 10)
	second := readSync(t, Options{Path: dump, Source: "enwiki", DeleteMissing: true, ArticlesPath: set}, -1)
	if len(second.docs) != 106-7 {
		t.Errorf("the newer dump has %d articles, want %d", len(second.docs), 106-7)
	}
	got := map[string]string{}
	for _, d := range second.deleted {
		got[strings.TrimPrefix(d.ID, "enwiki:")] = d.Version
	}
	if !reflect.DeepEqual(got, wantGone) {
		t.Fatalf("deleted %v, want %v", got, wantGone)
	}
}

// A newer dump read after a crash that left deletions unacked still deletes them (the unfinished
// read's set is folded into the kept one), besides what it lacks itself, and nothing it has.
func TestDeleteMissingNewerDumpAfterACrash(t *testing.T) {
	dir, state := t.TempDir(), t.TempDir()
	set := filepath.Join(state, "p.wikipedia-articles")
	open := func(name string, pages []string) Options {
		dump, _ := wikitest.WriteMultistream(t, dir, name, siteinfo, pages, 4)
		return Options{Path: dump, Source: "testwiki", DeleteMissing: true, ArticlesPath: set}
	}
	readSync(t, open("one", monthOne()), -1)
	if crashed := readSync(t, open("two", monthTwo()), 1); len(crashed.deleted) != len(monthTwoGone) {
		t.Fatalf("deleted %v", deletedIDs(crashed.deleted))
	}
	// Month three: month two without 119 and without the new page 150.
	var three []string
	for _, p := range monthTwo() {
		if _, id := exportxml.PageHead([]byte(p)); id != "119" && id != "150" {
			three = append(three, p)
		}
	}
	got := readSync(t, open("three", three), -1)
	var versions []string
	for _, d := range got.deleted {
		versions = append(versions, strings.TrimPrefix(d.ID, "testwiki:")+"@"+d.Version)
	}
	if want := "[103@5103 105@5105 108@5108 111@5111 113@5113 116@5116 119@5119 150@7150]"; fmt.Sprint(versions) != want {
		t.Fatalf("deleted %v, want %s", versions, want)
	}
	if s := stateFiles(t, state); s != "p.wikipedia-articles" {
		t.Fatalf("state %s", s)
	}
}

package launch_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/connectors/vectorfile"
	"github.com/reignpipe/reignpipe/connectors/wikipedia/wikitest"
	"github.com/reignpipe/reignpipe/internal/pgtest"
	"github.com/reignpipe/reignpipe/internal/testenv"
	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/engine/launch"
	"github.com/reignpipe/reignpipe/pipelines/serving/search"
	"github.com/reignpipe/reignpipe/schemas"
)

// damagedCopy copies a multistream dump and its index, with the k-th page stream of the copy
// damaged.
func damagedCopy(t *testing.T, dir, dump string, k int) string {
	t.Helper()
	index := strings.Replace(dump, ".xml.bz2", "-index.txt.bz2", 1)
	out := filepath.Join(dir, "damaged-"+filepath.Base(dump))
	outIndex := strings.Replace(out, ".xml.bz2", "-index.txt.bz2", 1)
	for from, to := range map[string]string{dump: out, index: outIndex} {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		wikitest.WriteFile(t, dir, filepath.Base(to), b)
	}
	wikitest.Damage(t, out, outIndex, k)
	return out
}

var townTopics = []string{"a harbour town known for its lighthouse and herring boats", "a mountain village with a ski jump",
	"a river port that built barges", "a market town famous for cheese", "a mining town in the hills",
	"a spa town with hot springs", "a university town with an old library", "a railway junction on the plain",
	"a fortress town above a gorge", "a wine town on a south slope", "a fishing village on a lake", "an island town reached by ferry"}

// townText is a few paragraphs about town i.
func townText(i int) string {
	topic := townTopics[i-1]
	return strings.Repeat(fmt.Sprintf("Town %d is %s. Its people tell of %s in songs and in the town hall's records. ", i, topic, topic), 6)
}

// The done-means test of the Wikipedia sync: a dump, then a newer dump with two pages deleted,
// two turned into redirects and one moved out of the article namespace. After the second run
// those five are gone from every sink (Parquet, JSONL, pgvector) and from search over each
// store; every other page is unchanged (same version, vector and pgvector row) and the run
// embedded no window. Before it, a read of the newer dump with a damaged stream deletes nothing.
// A third run over the same dump deletes nothing more.
func TestWikipediaSyncDeletesWhatANewerDumpLacks(t *testing.T) {
	dsn := pgtest.Database(t)
	model, tok := testenv.GN(t, "bge-small-en-v15")
	t.Setenv("REIGNPIPE_ORT_LIB", testenv.ORTLibrary(t))
	dir := t.TempDir()
	var older, newer []string
	gone := map[string]bool{}
	for i := 1; i <= 12; i++ {
		title, text, rev := fmt.Sprintf("Town %d", i), townText(i), 100+i
		older = append(older, wikitest.Page(i, 0, rev, title, text, false))
		switch i {
		case 3, 9: // deleted
		case 5, 10: // now redirects
			newer = append(newer, wikitest.Page(i, 0, 200+i, title, "#REDIRECT [[Town 1]]", true))
		case 7: // moved to a user's drafts
			newer = append(newer, wikitest.Page(i, 2, 200+i, "User:Someone/"+title, text, false))
		default:
			newer = append(newer, wikitest.Page(i, 0, rev, title, text, false))
			continue
		}
		gone[fmt.Sprintf("townwiki:%d", i)] = true
	}
	dumpOne, _ := wikitest.WriteMultistream(t, dir, "townwiki-20260101-pages-articles", wikitest.Siteinfo("townwiki"), older, 4)
	dumpTwo, _ := wikitest.WriteMultistream(t, dir, "townwiki-20260201-pages-articles", wikitest.Siteinfo("townwiki"), newer, 4)

	yaml := fmt.Sprintf(`version: 1
name: towns
source: {type: wikipedia, path: %q, delete_missing: true}
gn: {name: bge-small-en-v15, model: %q, tokenizer: %q}
batching: {max_wait: 5ms}
cache: {dir: %q}
sinks:
  - {type: parquet, dir: %q}
  - {type: jsonl, dir: %q}
  - {type: pgvector, dsn: %q, table: pat, index: deferred}
run: {state_dir: %q, progress: off, commit_every: 3}
`, dumpOne, model, tok, filepath.Join(dir, "cache"), filepath.Join(dir, "parquet"), filepath.Join(dir, "jsonl"), dsn, filepath.Join(dir, "state"))
	cfg, err := pipelines.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	run := func(dump string, failed int64) map[string]any {
		t.Helper()
		cfg.Source.Path = dump
		sum, err := launch.Run(context.Background(), cfg, launch.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if sum.DocsFailed != failed || sum.Stopped != "completed" {
			t.Fatalf("run over %s: %+v", filepath.Base(dump), sum)
		}
		var out map[string]any
		if err := json.Unmarshal(sum.JSON(), &out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	// files is what a vector file sink holds: doc id -> version and vector.
	type stored struct {
		version string
		vec     []float32
	}
	files := func(name string) map[string]stored {
		t.Helper()
		latest, err := vectorfile.Latest(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]stored{}
		for id, v := range latest {
			out[id] = stored{v.Version, v.Vector}
		}
		return out
	}

	space := run(dumpOne, 0)["vector_space"].(string)
	before := files("parquet")
	if len(before) != 12 {
		t.Fatalf("after the first dump parquet holds %d documents, want 12", len(before))
	}
	pgBefore := pgRows(t, dsn, space)

	// The newer dump with its second stream damaged (pages 6, 7, 8 and 10): nothing is deleted,
	// and the summary says how many kept articles the read did not hand out.
	damaged := damagedCopy(t, dir, dumpTwo, 1)
	if sum := run(damaged, 4); sum["docs_deleted"] != 0.0 || sum["docs_skipped"].(map[string]any)["deletion_withheld"] != 7.0 {
		t.Fatalf("a read with a lost stream: deleted %v, skipped %v", sum["docs_deleted"], sum["docs_skipped"])
	}
	if got := files("parquet"); len(got) != 12 {
		t.Fatalf("after a read with a lost stream parquet holds %d documents, want 12", len(got))
	}

	sum := run(dumpTwo, 0)
	if sum["gn_windows"] != 0.0 {
		t.Errorf("the second dump embedded %v windows; its kept pages are unchanged", sum["gn_windows"])
	}
	if sum["docs_deleted"] != float64(len(gone)) {
		t.Errorf("the second run's summary: docs_deleted %v, want %d", sum["docs_deleted"], len(gone))
	}
	for _, name := range []string{"parquet", "jsonl"} {
		after := files(name)
		if len(after) != 12-len(gone) {
			t.Errorf("%s holds %d documents after the newer dump, want %d", name, len(after), 12-len(gone))
		}
		for id, s := range after {
			if gone[id] {
				t.Errorf("%s still holds %s", name, id)
			} else if b := before[id]; b.version != s.version || !slices.Equal(b.vec, s.vec) {
				t.Errorf("%s: %s changed: version %s -> %s", name, id, b.version, s.version)
			}
		}
	}
	pgAfter := pgRows(t, dsn, space)
	if len(pgAfter) != 12-len(gone) {
		t.Errorf("pgvector holds %d rows after the newer dump, want %d", len(pgAfter), 12-len(gone))
	}
	for id, r := range pgAfter {
		if gone[id] {
			t.Errorf("pgvector still holds %s", id)
		} else if b := pgBefore[id]; b.version != r.version || !slices.Equal(b.vec, r.vec) || !b.written.Equal(r.written) {
			t.Errorf("pgvector: %s's row was rewritten", id)
		}
	}

	// Search over every store: the nearest of all to a kept town's vector are the kept towns.
	for i, sink := range cfg.Sinks {
		st, err := search.OpenStore(context.Background(), cfg, i)
		if err != nil {
			t.Fatal(err)
		}
		q := before["townwiki:1"].vec
		ans, err := st.Search(context.Background(), space, q, 20, schemas.Exclude{}, true)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, h := range ans.Hits {
			got = append(got, h.DocID)
		}
		if len(got) != 12-len(gone) || slices.ContainsFunc(got, func(id string) bool { return gone[id] }) {
			t.Errorf("search over %s (%s) answers %v", sink.Type, st.Name(), got)
		}
		var nf *connectors.NotFoundError
		if _, err := st.Lookup(context.Background(), space, "townwiki:3"); !errors.As(err, &nf) {
			t.Errorf("%s: a deleted page is still found: %v", sink.Type, err)
		}
		st.Close()
	}

	// The same dump again: everything was committed, nothing is deleted twice.
	if sum := run(dumpTwo, 0); sum["docs_deleted"] != 0.0 || sum["gn_windows"] != 0.0 {
		t.Errorf("the newer dump a second time: deleted %v, embedded %v windows", sum["docs_deleted"], sum["gn_windows"])
	}
}

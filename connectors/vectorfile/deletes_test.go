package vectorfile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/internal/parquetoracle"
	"github.com/reignpipe/reignpipe/internal/testenv"
	"github.com/reignpipe/reignpipe/schemas"
)

// fileOp is one call on a sink: a vector of doc at version, or (del) its deletion.
type fileOp struct {
	doc, version string
	del          bool
}

func put(doc, version string) fileOp { return fileOp{doc: doc, version: version} }
func del(doc, version string) fileOp { return fileOp{doc: doc, version: version, del: true} }

// deletionHistory is what the folder receives, one part per step; want is the live set it
// leaves, doc id → version. The first step is a version-1 part (no deleted column).
var deletionHistory = struct {
	steps [][]fileOp
	want  map[string]string
}{
	steps: [][]fileOp{
		{put("v1-deleted", "3"), put("v1-live", "4")},
		{put("newer", "9"), put("older-tomb", "10"), put("same", "5"), put("redelivered", "5"), put("back", "5"),
			put("stale-later", "1"), put("empty", ""), put("empty-back", ""), put("dates", "2024-01-02"),
			put("num-kept", "0100"), put("num-gone", "99"), put("tie", "10"), put("in-part", "2")},
		{put("newer", "10"), del("older-tomb", "9"), del("same", "5"), del("redelivered", "5"), del("back", "5"),
			del("stale-later", "7"), del("empty", ""), del("empty-back", ""), del("dates", "2023-12-31"),
			del("num-kept", "99"), del("num-gone", "0100"), put("tie", "10"), del("v1-deleted", "3"),
			put("in-part", "3"), del("in-part", "3"), put("in-part", "3")},
		{put("redelivered", "5"), put("back", "6"), put("stale-later", "3"), put("empty-back", ""),
			put("unversioned-del", "5"), put("unversioned-back", "5"), put("unversioned-twice", "8")},
		{del("unversioned-del", ""), del("unversioned-back", ""), put("unversioned-twice", "9"), del("unversioned-twice", "")},
		{put("unversioned-back", "3"), put("unversioned-twice", "2"), del("unversioned-twice", ""), put("unversioned-twice", "1")},
	},
	want: map[string]string{
		"v1-live": "4", "newer": "10", "older-tomb": "10", "back": "6", "empty-back": "", "dates": "2024-01-02",
		"num-kept": "0100", "tie": "10", "unversioned-back": "3", "unversioned-twice": "1",
	},
}

// writeV1Part writes part seq as a version-1 sink did: VectorSchema without the deleted column.
func writeV1Part(t *testing.T, dir string, seq int, vs []schemas.DocVector) {
	t.Helper()
	full := schemas.VectorSchema(testDim, nil)
	md := arrow.MetadataFrom(map[string]string{schemas.MetaSchemaVersion: "1", schemas.MetaDim: strconv.Itoa(testDim)})
	sc := arrow.NewSchema(full.Fields()[:9], &md)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for _, v := range vs {
		b.Field(0).(*array.StringBuilder).Append(v.DocID)
		b.Field(1).(*array.StringBuilder).Append(v.Title)
		b.Field(2).(*array.StringBuilder).Append(v.Source)
		b.Field(3).(*array.StringBuilder).Append(v.Version)
		b.Field(4).(*array.Int32Builder).Append(int32(v.NChunks))
		b.Field(5).(*array.Int64Builder).Append(int64(v.NTokens))
		b.Field(6).(*array.Uint64Builder).Append(v.ContentHash)
		b.Field(7).(*array.StringBuilder).Append(v.Space)
		lb := b.Field(8).(*array.FixedSizeListBuilder)
		lb.Append(true)
		lb.ValueBuilder().(*array.Float32Builder).AppendValues(v.Vector, nil)
	}
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("part-%08d.parquet", seq)))
	if err != nil {
		t.Fatal(err)
	}
	fw, err := pqarrow.NewFileWriter(sc, f, nil, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		t.Fatal(err)
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	if err := fw.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
}

// testVector is doc's vector at version: its title says which, its vector points its own way.
func testVector(doc, version string) schemas.DocVector {
	vec := make([]float32, testDim)
	vec[len(doc)%testDim] = 1
	return schemas.DocVector{DocID: doc, Title: doc + "@" + version, Source: "test", Version: version,
		ContentHash: uint64(len(doc)), NChunks: 1, NTokens: 3, Space: "gn-meanpool:fp@1", Vector: vec}
}

// writeHistory writes deletionHistory into dir through sinks of open, one part per step, a
// sink reopened for each.
func writeHistory(t *testing.T, dir string, open func(t *testing.T, dir string, mem memory.Allocator) connectors.Sink) {
	t.Helper()
	ctx := context.Background()
	h := deletionHistory
	var v1 []schemas.DocVector
	for _, o := range h.steps[0] {
		v1 = append(v1, testVector(o.doc, o.version))
	}
	writeV1Part(t, dir, 1, v1)
	for _, step := range h.steps[1:] {
		s := open(t, dir, nil)
		want := map[string]int64{"written": 0, "deleted": 0}
		for _, o := range step {
			var err error
			if o.del {
				err = s.Delete(ctx, schemas.Deletion{DocID: o.doc, Source: "test", Version: o.version})
				want["deleted"]++
			} else {
				err = s.Write(ctx, testVector(o.doc, o.version))
				want["written"]++
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		// The summary's per-sink counts are of rows in visible parts only.
		counter := s.(connectors.SinkCounter)
		if c := counter.Counts(); c["written"] != 0 || c["deleted"] != 0 {
			t.Fatalf("counts before the part is visible: %v, want zeros", c)
		}
		if err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if c := counter.Counts(); !maps.Equal(c, want) {
			t.Fatalf("counts after Close: %v, want %v", c, want)
		}
	}
}

// Both formats: the readers keep the newest row of each doc id, a tombstone winning a tie,
// and leave out the deleted; the store never answers with a deleted document.
func TestTombstonesLeaveTheLiveSet(t *testing.T) {
	ctx := context.Background()
	for _, tc := range sinkCases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeHistory(t, dir, tc.open)
			got, err := Latest(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(deletionHistory.want) {
				t.Errorf("Latest holds %d documents, want %d: %v", len(got), len(deletionHistory.want), slices.Sorted(maps.Keys(got)))
			}
			for id, version := range deletionHistory.want {
				if v, ok := got[id]; !ok || v.Version != version || v.Title != id+"@"+version {
					t.Errorf("Latest[%s] = %q (%v), want version %q", id, v.Version, ok, version)
				}
			}
			st := NewStore(nil, dir)
			for id := range got {
				q := testVector(id, "").Vector
				ans, err := st.Search(ctx, "gn-meanpool:fp@1", q, 100, schemas.Exclude{}, true)
				if err != nil {
					t.Fatal(err)
				}
				if ans.Among != int64(len(deletionHistory.want)) || len(ans.Hits) != len(deletionHistory.want) {
					t.Fatalf("search ranks %d documents (%d hits), want the %d live", ans.Among, len(ans.Hits), len(deletionHistory.want))
				}
				for _, h := range ans.Hits {
					if _, ok := deletionHistory.want[h.DocID]; !ok {
						t.Fatalf("search returns the deleted %s", h.DocID)
					}
				}
				break
			}
			for _, gone := range []string{"same", "redelivered", "stale-later", "empty", "v1-deleted", "num-gone", "in-part"} {
				var nf *connectors.NotFoundError
				if _, err := st.Lookup(ctx, "gn-meanpool:fp@1", gone); !errors.As(err, &nf) {
					t.Errorf("lookup of the deleted %s: %v, want not found", gone, err)
				}
			}
			if v, err := st.Lookup(ctx, "gn-meanpool:fp@1", "back"); err != nil || v.Version != "6" {
				t.Errorf("lookup of back = %+v, %v; want version 6", v, err)
			}
		})
	}
}

// Replaces is the one rule the folds apply; a deletion without a version takes whatever was
// kept, versions and all, and is not remembered.
func TestReplaces(t *testing.T) {
	cases := []struct {
		keptVersion string
		keptDeleted bool
		version     string
		deleted     bool
		want        bool
	}{
		{"9", false, "10", false, true},
		{"10", false, "9", false, false},
		{"5", false, "5", false, true}, // the later row
		{"5", false, "5", true, true},  // a tombstone wins a tie
		{"5", true, "5", false, false}, // wherever it is
		{"5", true, "6", false, true},
		{"10", false, "9", true, false},
		{"10", false, "", true, true}, // no version: whatever is stored
		{"", true, "3", false, true},  // and not remembered
		{"", true, "", false, true},
		{"0100", false, "99", true, false},
	}
	for _, c := range cases {
		if got := Replaces(c.keptVersion, c.keptDeleted, c.version, c.deleted); got != c.want {
			t.Errorf("Replaces(%q deleted=%v, %q deleted=%v) = %v, want %v", c.keptVersion, c.keptDeleted, c.version, c.deleted, got, c.want)
		}
	}
}

// readmeBlock returns the first fenced block of lang in the README's section on reading the
// vector files: the interop test runs what the README shows.
func readmeBlock(t *testing.T, lang string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.Root(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	start := strings.Index(text, "### Reading the vector files")
	if start < 0 {
		t.Fatal("README has no section on reading the vector files")
	}
	m := regexp.MustCompile("(?s)\n```" + lang + "\n(.*?)\n```\n").FindStringSubmatch(text[start:])
	if m == nil {
		t.Fatalf("README's section on reading the vector files has no %s block", lang)
	}
	return m[1]
}

// The README's pyarrow and DuckDB queries, run by the readers themselves on parts of both
// schema versions, see exactly the live set.
func TestReadmeQueriesSeeTheLiveSet(t *testing.T) {
	py := testenv.Python(t, "pyarrow", "duckdb")
	dir := t.TempDir()
	writeHistory(t, dir, sinkCases[0].open)
	const folder = "out/demo/vectors"
	pyBlock, sqlBlock := readmeBlock(t, "python"), readmeBlock(t, "sql")
	if !strings.Contains(pyBlock, `"`+folder+`"`) || !strings.Contains(sqlBlock, "'"+folder+"/") {
		t.Fatalf("the README's queries no longer read %s", folder)
	}
	script := strings.ReplaceAll(pyBlock, `"`+folder+`"`, "sys.argv[1]") + `
import duckdb, json, sys
sql = sys.argv[2].replace("'` + folder + `/", "'" + sys.argv[1] + "/")
print(json.dumps({
    "pyarrow": dict(zip(docs["doc_id"].to_pylist(), docs["version"].to_pylist())),
    "duckdb": dict(duckdb.sql("SELECT doc_id, version FROM (" + sql + ")").fetchall()),
}))
`
	cmd := exec.Command(py, "-c", "import sys\n"+script, dir, sqlBlock)
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("the README's queries fail: %v\n%s", err, ee.Stderr)
		}
		t.Fatal(err)
	}
	var got map[string]map[string]string
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, reader := range []string{"pyarrow", "duckdb"} {
		if !maps.Equal(got[reader], deletionHistory.want) {
			t.Errorf("%s sees %v, want %v", reader, got[reader], deletionHistory.want)
		}
	}
}

// A tombstone in a part with the GN companion columns fills both vectors with zeros, so
// pyarrow and DuckDB read it without a null anywhere, and the readers drop the document.
func TestGNTombstoneReads(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := NewParquet(ParquetOptions{Dir: dir, Dim: testDim, GNDim: 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"kept", "gone"} {
		v := testVector(id, "1")
		v.GNSpace, v.GNVector = "gn-meanpool:fp@1", []float32{0.6, 0.8, 0}
		if err := s.Write(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Delete(ctx, schemas.Deletion{DocID: "gone", Source: "test", Version: "1"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := Latest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got["kept"]; len(got) != 1 || !ok {
		t.Fatalf("Latest = %v, want kept only", slices.Sorted(maps.Keys(got)))
	}
	res := parquetoracle.Read(t, filepath.Join(dir, "part-00000001.parquet"))
	for _, reader := range []string{"pyarrow", "duckdb"} {
		side := res[reader]
		for name, n := range side.NullCounts {
			if n != 0 {
				t.Errorf("%s: column %s has %d nulls", reader, name, n)
			}
		}
		deleted := parquetoracle.Column[bool](t, side, "deleted")
		ids, gnVecs := parquetoracle.Column[string](t, side, "doc_id"), parquetoracle.Column[[]uint32](t, side, "gn_vector")
		if len(deleted) != 3 || deleted[0] || deleted[1] || !deleted[2] || ids[2] != "gone" {
			t.Fatalf("%s: doc_id %v deleted %v, want the third row gone's tombstone", reader, ids, deleted)
		}
		if !slices.Equal(gnVecs[2], []uint32{0, 0, 0}) {
			t.Errorf("%s: the tombstone's gn_vector bits %v, want zeros", reader, gnVecs[2])
		}
	}
}

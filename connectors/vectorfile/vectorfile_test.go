package vectorfile

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/schemas"
)

const testDim = 6

func testVectors(n int, version string) []schemas.DocVector {
	special := []float32{float32(math.Copysign(0, -1)), math.SmallestNonzeroFloat32, math.MaxFloat32, -1.0 / 3}
	out := make([]schemas.DocVector, n)
	for i := range out {
		vec := make([]float32, testDim)
		for j := range vec {
			vec[j] = float32(i)*0.37 - float32(j)*1.1
		}
		vec[i%testDim] = special[i%len(special)]
		out[i] = schemas.DocVector{
			DocID: fmt.Sprintf("enwiki:%d", i), Title: fmt.Sprintf("Title «%d» <&>", i), Source: "enwiki", Version: version,
			ContentHash: math.MaxUint64 - uint64(i)*0x1234567, NChunks: i + 1, NTokens: 1000 * i, Space: "gn-meanpool:fp@1", Vector: vec,
		}
	}
	return out
}

func sameVector(t *testing.T, got, want schemas.DocVector) {
	t.Helper()
	gv, wv := got.Vector, want.Vector
	got.Vector, want.Vector = nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("vector fields = %+v, want %+v", got, want)
	}
	if len(gv) != len(wv) {
		t.Fatalf("%s: %d dims, want %d", want.DocID, len(gv), len(wv))
	}
	for i := range gv {
		if math.Float32bits(gv[i]) != math.Float32bits(wv[i]) {
			t.Fatalf("%s: vector[%d] = %v, want %v", want.DocID, i, gv[i], wv[i])
		}
	}
}

func readAll(t *testing.T, dir string, mem memory.Allocator) []schemas.DocVector {
	t.Helper()
	var got []schemas.DocVector
	err := readVectors(context.Background(), folderOf(nil, dir), mem, func(v schemas.DocVector, deleted bool) error {
		if deleted {
			t.Fatalf("%s: a tombstone where only vectors were written", v.DocID)
		}
		got = append(got, v)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func partNames(t *testing.T, dir string) []string {
	t.Helper()
	parts, err := listParts(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range parts {
		names = append(names, p.name)
	}
	return names
}

type sinkCase struct {
	name string
	open func(t *testing.T, dir string, mem memory.Allocator) connectors.Sink
	ext  string
}

var sinkCases = []sinkCase{
	{"parquet", func(t *testing.T, dir string, mem memory.Allocator) connectors.Sink {
		s, err := NewParquet(ParquetOptions{Dir: dir, Dim: testDim, BatchRows: 3, Allocator: mem,
			Metadata: map[string]string{schemas.MetaGNFingerprint: "fp@1"}})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}, extParquet},
	{"jsonl", func(t *testing.T, dir string, _ memory.Allocator) connectors.Sink {
		s, err := NewJSONL(JSONLOptions{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}, extJSONL},
}

func TestSinkRoundTrip(t *testing.T) {
	ctx := context.Background()
	for _, tc := range sinkCases {
		t.Run(tc.name, func(t *testing.T) {
			alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer alloc.AssertSize(t, 0)
			dir := t.TempDir()
			s := tc.open(t, dir, alloc)
			if err := s.Flush(ctx); err != nil { // nothing written: no part
				t.Fatal(err)
			}
			want := testVectors(11, "100")
			for i, v := range want {
				if err := s.Write(ctx, v); err != nil {
					t.Fatal(err)
				}
				if i == 6 {
					if got := len(readAll(t, dir, alloc)); got != 0 {
						t.Fatalf("%d vectors visible before Flush", got)
					}
					if err := s.Flush(ctx); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := s.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if err := s.Write(ctx, want[0]); err == nil {
				t.Error("Write after Close accepted")
			}
			if names := partNames(t, dir); !reflect.DeepEqual(names, []string{"part-00000001" + tc.ext, "part-00000002" + tc.ext}) {
				t.Errorf("parts = %v", names)
			}
			got := readAll(t, dir, alloc)
			if len(got) != len(want) {
				t.Fatalf("read %d vectors, want %d", len(got), len(want))
			}
			for i := range want {
				sameVector(t, got[i], want[i])
			}
		})
	}
}

func TestSinkRejectsBadInput(t *testing.T) {
	ctx := context.Background()
	if _, err := NewParquet(ParquetOptions{Dir: t.TempDir()}); err == nil {
		t.Error("NewParquet without Dim accepted")
	}
	if _, err := NewParquet(ParquetOptions{Dim: 3}); err == nil {
		t.Error("NewParquet without Dir accepted")
	}
	if _, err := NewParquet(ParquetOptions{Dir: t.TempDir(), Dim: 3, BatchRows: -1}); err == nil {
		t.Error("NewParquet with negative BatchRows accepted")
	}
	if _, err := NewJSONL(JSONLOptions{}); err == nil {
		t.Error("NewJSONL without Dir accepted")
	}
	p, _ := NewParquet(ParquetOptions{Dir: t.TempDir(), Dim: testDim})
	defer p.Close(ctx)
	bad := testVectors(1, "1")[0]
	bad.Vector = bad.Vector[:2]
	if err := p.Write(ctx, bad); err == nil {
		t.Error("parquet accepted a vector of the wrong dim")
	}
	j, _ := NewJSONL(JSONLOptions{Dir: t.TempDir()})
	defer j.Close(ctx)
	for _, x := range []float32{float32(math.NaN()), float32(math.Inf(-1))} {
		v := testVectors(1, "1")[0]
		v.Vector[0] = x
		if err := j.Write(ctx, v); err == nil {
			t.Errorf("jsonl accepted %v", x)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := j.Write(cctx, testVectors(1, "1")[0]); err == nil {
		t.Error("Write with a cancelled context accepted")
	}
}

func TestJSONLLineFormat(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := NewJSONL(JSONLOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	v := testVectors(1, "7")[0]
	if err := s.Write(ctx, v); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "part-00000001.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(lines) != 1 {
		t.Fatalf("%d lines", len(lines))
	}
	var obj map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &obj); err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if want := []string{"content_hash", "deleted", "doc_id", "n_chunks", "n_tokens", "source", "space", "title", "vector", "version"}; !reflect.DeepEqual(keys, want) {
		t.Errorf("keys = %v", keys)
	}
	if obj["content_hash"] != fmt.Sprintf("%016x", v.ContentHash) {
		t.Errorf("content_hash = %v", obj["content_hash"])
	}
}

func TestReopenContinuesSequence(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	write := func(s connectors.Sink, vs []schemas.DocVector) {
		t.Helper()
		for _, v := range vs {
			if err := s.Write(ctx, v); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	write(sinkCases[0].open(t, dir, nil), testVectors(2, "1"))
	write(sinkCases[1].open(t, dir, nil), testVectors(2, "2"))
	write(sinkCases[0].open(t, dir, nil), testVectors(2, "3"))
	write(sinkCases[0].open(t, dir, nil), nil) // no rows: no part
	want := []string{"part-00000001.parquet", "part-00000002.jsonl", "part-00000003.parquet"}
	if got := partNames(t, dir); !reflect.DeepEqual(got, want) {
		t.Errorf("parts = %v, want %v", got, want)
	}
	got := readAll(t, dir, memory.DefaultAllocator)
	for i, v := range got {
		if w := fmt.Sprint(i/2 + 1); v.Version != w {
			t.Errorf("vector %d version %s, want %s (parts out of order)", i, v.Version, w)
		}
	}
}

// TestCrashLeavesNoVisiblePart: a sink that dies before Flush leaves only a temp file, which
// readers ignore and the next sink removes.
func TestCrashLeavesNoVisiblePart(t *testing.T) {
	ctx := context.Background()
	for _, tc := range sinkCases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := tc.open(t, dir, nil)
			for _, v := range testVectors(5, "1") {
				if err := s.Write(ctx, v); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			for _, v := range testVectors(7, "2") { // 7 > BatchRows: some reach the temp file
				if err := s.Write(ctx, v); err != nil {
					t.Fatal(err)
				}
			}
			if p, ok := s.(*ParquetSink); ok {
				_ = p.part.w.Flush()
			}
			if j, ok := s.(*JSONLSink); ok {
				_ = j.part.w.Flush()
			}
			tmps, _ := filepath.Glob(filepath.Join(dir, "*.tmp"))
			if len(tmps) != 1 {
				t.Fatalf("temp files = %v", tmps)
			}
			got := readAll(t, dir, memory.DefaultAllocator)
			if len(got) != 5 {
				t.Fatalf("read %d vectors, want the 5 flushed", len(got))
			}
			// "Crash": abandon s without Close (release its Arrow buffers only).
			if p, ok := s.(*ParquetSink); ok {
				_ = p.fw.Close()
				_ = p.part.f.Close()
				p.b.Release()
			} else {
				_ = s.(*JSONLSink).part.f.Close()
			}
			s2 := tc.open(t, dir, nil)
			defer s2.Close(ctx)
			if tmps, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(tmps) != 0 {
				t.Errorf("temp files after reopen = %v", tmps)
			}
		})
	}
}

func TestLatest(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	parts := [][]schemas.DocVector{
		{{DocID: "a", Version: "9", Title: "a9"}, {DocID: "b", Version: "2024-01-02", Title: "b-jan"}, {DocID: "c", Version: "5", Title: "c5-first"}},
		{{DocID: "a", Version: "10", Title: "a10"}, {DocID: "b", Version: "2023-12-31", Title: "b-dec"}, {DocID: "c", Version: "5", Title: "c5-second"}},
		{{DocID: "a", Version: "8", Title: "a8"}},
	}
	for i, vs := range parts {
		var s connectors.Sink = sinkCases[i%2].open(t, dir, nil)
		for _, v := range vs {
			v.Vector = make([]float32, testDim)
			if err := s.Write(ctx, v); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	got, err := Latest(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a": "a10", "b": "b-jan", "c": "c5-second"}
	if len(got) != len(want) {
		t.Fatalf("Latest = %v", got)
	}
	for id, title := range want {
		if got[id].Title != title {
			t.Errorf("Latest[%s] = %s, want %s", id, got[id].Title, title)
		}
	}
}

func TestParsePartName(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"part-00000001.parquet", true}, {"part-123456789.jsonl", true}, {"part-00000001.parquet.tmp", false},
		{"part-1.parquet", false}, {"part-0000000x.jsonl", false}, {"shard-00000001.parquet", false}, {"part-00000001.csv", false},
	}
	for _, tc := range tests {
		if _, ok := parsePartName(tc.name); ok != tc.ok {
			t.Errorf("parsePartName(%q) = %v", tc.name, ok)
		}
	}
}

func FuzzReadJSONLPart(f *testing.F) {
	f.Add([]byte(`{"doc_id":"a","content_hash":"ffffffffffffffff","vector":[1,-0,3e38]}` + "\n"))
	f.Add([]byte(`{"doc_id":"a","content_hash":"xyz"}`))
	f.Add([]byte(`{"doc_id":"a","content_hash":"0000000000000001","vector":[1e99]}`))
	f.Add([]byte(`{"doc_id":"a","source":"s","version":"3","content_hash":"0000000000000000","space":"","vector":[],"deleted":true}` + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "part-00000001.jsonl")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		_ = readJSONLPart(context.Background(), folderOf(nil, filepath.Dir(path)), path, func(v schemas.DocVector, _ bool) error {
			if v.DocID == "" {
				t.Fatal("vector without doc id accepted")
			}
			return nil
		})
	})
}

func FuzzReadParquetPart(f *testing.F) {
	dir := f.TempDir()
	s, err := NewParquet(ParquetOptions{Dir: dir, Dim: testDim})
	if err != nil {
		f.Fatal(err)
	}
	for _, v := range testVectors(4, "1") {
		if err := s.Write(context.Background(), v); err != nil {
			f.Fatal(err)
		}
	}
	if err := s.Delete(context.Background(), schemas.Deletion{DocID: "enwiki:1", Version: "1"}); err != nil {
		f.Fatal(err)
	}
	if err := s.Close(context.Background()); err != nil {
		f.Fatal(err)
	}
	good, err := os.ReadFile(filepath.Join(dir, "part-00000001.parquet"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good, 0, byte(0))
	f.Add(good, len(good)/2, byte(0x10))
	f.Add(good, len(good)-12, byte(0x01))
	f.Fuzz(func(t *testing.T, data []byte, at int, flip byte) {
		data = append([]byte(nil), data...)
		if len(data) > 0 {
			if at < 0 {
				at = -at
			}
			data[at%len(data)] ^= flip
		}
		path := filepath.Join(t.TempDir(), "part-00000001.parquet")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		_ = readParquetPart(context.Background(), folderOf(nil, filepath.Dir(path)), path, memory.DefaultAllocator, func(v schemas.DocVector, deleted bool) error {
			if !deleted && len(v.Vector) == 0 {
				t.Fatal("empty vector decoded")
			}
			return nil
		})
	})
}

// A REIGN vector travels with its GN mean-pool companion (another space and dimension) in
// both file kinds; rows without the companion columns still read as before.
func TestGNCompanionRoundTrip(t *testing.T) {
	ctx := context.Background()
	want := testVectors(5, "7")
	for i := range want {
		want[i].Space = "reign:ck"
		want[i].GNSpace = "gn-meanpool:fp"
		want[i].GNVector = []float32{float32(i), -0.5, math.SmallestNonzeroFloat32}
	}
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer alloc.AssertSize(t, 0)
	pq, jl := t.TempDir(), t.TempDir()
	p, err := NewParquet(ParquetOptions{Dir: pq, Dim: testDim, GNDim: 3, Allocator: alloc})
	if err != nil {
		t.Fatal(err)
	}
	j, err := NewJSONL(JSONLOptions{Dir: jl})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range want {
		for _, s := range []interface {
			Write(context.Context, schemas.DocVector) error
		}{p, j} {
			if err := s.Write(ctx, v); err != nil {
				t.Fatal(err)
			}
		}
	}
	bad := want[0]
	bad.GNVector = bad.GNVector[:2]
	if err := p.Write(ctx, bad); err == nil {
		t.Fatal("GN vector of the wrong dimension accepted")
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{pq, jl} {
		got := readAll(t, dir, alloc)
		if len(got) != len(want) {
			t.Fatalf("%s: read %d", dir, len(got))
		}
		for i := range want {
			g, w := got[i], want[i]
			if g.GNSpace != w.GNSpace || !reflect.DeepEqual(g.GNVector, w.GNVector) {
				t.Fatalf("%s: companion %q %v, want %q %v", dir, g.GNSpace, g.GNVector, w.GNSpace, w.GNVector)
			}
			g.GNSpace, g.GNVector, w.GNSpace, w.GNVector = "", nil, "", nil
			sameVector(t, g, w)
		}
	}
}

// A JSONL part carries a sha256 that `sha256sum -c` checks; one changed digit in it is an error
// that names the part, not a vector read back silently wrong.
func TestJSONLPartChecksum(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s := sinkCases[1].open(t, dir, nil)
	for _, v := range testVectors(4, "1") {
		if err := s.Write(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	part := filepath.Join(dir, "part-00000001.jsonl")
	check := exec.Command("sha256sum", "-c", "."+filepath.Base(part)+".sha256")
	check.Dir = dir
	if out, err := check.CombinedOutput(); err != nil {
		t.Fatalf("sha256sum -c: %v\n%s", err, out)
	} else if !strings.Contains(string(out), "OK") {
		t.Fatalf("sha256sum -c: %s", out)
	}
	if got := readAll(t, dir, memory.DefaultAllocator); len(got) != 4 {
		t.Fatalf("read %d vectors", len(got))
	}
	b, _ := os.ReadFile(part)
	i := strings.Index(string(b), `"vector":[`) + len(`"vector":[`)
	for b[i] < '0' || b[i] > '8' {
		i++
	}
	b[i]++ // one digit of one component
	if err := os.WriteFile(part, b, 0o644); err != nil {
		t.Fatal(err)
	}
	err := ReadVectors(dir, func(schemas.DocVector, bool) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "part-00000001.jsonl") || !strings.Contains(err.Error(), "changed or damaged") {
		t.Fatalf("ReadVectors of a changed part = %v", err)
	}
}

// A checksum whose part never became visible (a crash between the two) is removed on reopen;
// the checksums of visible parts stay.
func TestOrphanChecksumRemoved(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s := sinkCases[1].open(t, dir, nil)
	if err := s.Write(ctx, testVectors(1, "1")[0]); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	orphan := filepath.Join(dir, ".part-00000002.jsonl.sha256")
	if err := os.WriteFile(orphan, []byte("00  part-00000002.jsonl\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s2 := sinkCases[1].open(t, dir, nil)
	defer s2.Close(ctx)
	if _, err := os.Stat(orphan); !os.IsNotExist(err) {
		t.Fatalf("orphan checksum still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, ".part-00000001.jsonl.sha256")); err != nil {
		t.Fatalf("a visible part's checksum was removed: %v", err)
	}
}

// Abort drops what was written since the last Flush: no part appears, no temp stays, and the
// Arrow buffers are released.
func TestParquetAbortLeavesNothingVisible(t *testing.T) {
	dir := t.TempDir()
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer alloc.AssertSize(t, 0)
	s := sinkCases[0].open(t, dir, alloc).(*ParquetSink)
	for _, v := range testVectors(7, "1") { // 7 > BatchRows: some rows reach the temp part
		if err := s.Write(context.Background(), v); err != nil {
			t.Fatal(err)
		}
	}
	s.Abort()
	s.Abort() // a second Abort is a no-op
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("after Abort the folder holds %v", ents)
	}
	if err := s.Write(context.Background(), testVectors(1, "1")[0]); err == nil {
		t.Fatal("Write after Abort succeeded")
	}
}

package reaggregate

import (
	"errors"
	"math"
	"testing"

	"github.com/reignpipe/reignpipe/stages/aggregate"
	"github.com/reignpipe/reignpipe/stages/shardcache"
)

// A document's chunks come back in window order, repeats included; a window the cache lacks
// is a MissingError naming it; Vector is the mean-pool of the chunks by the manifest.
func TestReader(t *testing.T) {
	const dim = 2
	c, err := shardcache.Open(shardcache.Options{Dir: t.TempDir(), Fingerprint: "fake-gn", Dim: dim, K: 8, S: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, r := range []shardcache.Row{
		{Key: 1, DocID: "t:a", ChunkIndex: 0, NTokens: 8, Embedding: []float32{1, 0}},
		{Key: 2, DocID: "t:a", ChunkIndex: 1, NTokens: 8, Embedding: []float32{0, 1}},
	} {
		if _, err := c.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range []shardcache.Manifest{
		{DocID: "t:a", Version: "1", Keys: []uint64{2, 1, 2}},
		{DocID: "t:b", Version: "1", Keys: []uint64{1, 9}},
	} {
		if err := c.PutManifest(m); err != nil {
			t.Fatal(err)
		}
	}
	rd := NewReader(c, dim)
	ma, _, _ := c.Manifest("t:a")
	chunks, err := rd.Chunks(ma)
	if err != nil || len(chunks) != 3 || chunks[0][1] != 1 || chunks[1][0] != 1 || chunks[2][1] != 1 {
		t.Fatalf("chunks %v, %v", chunks, err)
	}
	mb, _, _ := c.Manifest("t:b")
	var missing *MissingError
	if _, err := rd.Chunks(mb); !errors.As(err, &missing) || missing.Window != 1 || missing.Key != 9 || missing.DocID != "t:b" {
		t.Fatalf("missing window: %v", err)
	}
	mp, err := aggregate.NewMeanPool(dim, "fake-gn")
	if err != nil {
		t.Fatal(err)
	}
	v, err := rd.Vector("t:a", mp)
	if want := []float32{float32(1 / math.Sqrt(5)), float32(2 / math.Sqrt(5))}; err != nil || math.Abs(float64(v[0]-want[0])) > 1e-6 || math.Abs(float64(v[1]-want[1])) > 1e-6 {
		t.Fatalf("vector %v, %v; want %v", v, err, want)
	}
	if _, err := rd.Vector("t:none", mp); err == nil {
		t.Fatal("a document without a manifest gave a vector")
	}
}

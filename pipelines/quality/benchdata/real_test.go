package benchdata

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/reignpipe/reignpipe/internal/testenv"
)

// TestRealData builds both kinds from the real files in ../shared/data (skipped when absent)
// and checks that the splits load and have the documented sizes.
func TestRealData(t *testing.T) {
	tests := []struct {
		name, rel string
		opts      Options
		minDocs   int
	}{
		{"patents", "patents/uspto", Options{Kind: KindPatentClaims, Source: SourceUSPTO}, 100},
		{"wikipedia", "wikipedia/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2",
			Options{Kind: KindHalves, Source: SourceWikipedia, MinChars: 2000}, 50},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.opts
			o.Input, o.Out, o.Seed = testenv.SharedData(t, tc.rel), filepath.Join(t.TempDir(), "bench"), 42
			sum, err := Build(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			n := sum.Docs
			if n < tc.minDocs || sum.Splits["train"].Queries != n*3/5 || sum.Splits["val"].Queries != n/5 {
				t.Fatalf("summary %+v", sum)
			}
			loadSplits(t, o.Out, sum)
			t.Logf("%s: %d candidates, %d kept, skipped %v, splits %v", tc.name, sum.Candidates, n, sum.Skipped, sum.Splits)
		})
	}
}

package runner

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/pipelines/engine"
)

// skippingSource ends without handing out an input, having skipped some.
type skippingSource struct {
	sliceSource
	skipped map[string]int64
	self    bool
}

func (s *skippingSource) Stats() connectors.SourceStats {
	return connectors.SourceStats{Skipped: s.skipped, BytesRead: 10}
}
func (s *skippingSource) SelfCheckpointing() bool { return s.self }

func TestNothingReadIsAnError(t *testing.T) {
	tests := []struct {
		name    string
		src     *skippingSource
		wantErr string
	}{
		{"empty", &skippingSource{}, "check source.path and source.type"},
		{"only skips", &skippingSource{skipped: map[string]int64{"redirect": 3, "namespace": 2}}, "every input was skipped (namespace 2, redirect 3)"},
		{"watched folder, up to date", &skippingSource{self: true}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rg := newRig(t, t.TempDir(), nil, Options{})
			rg.r.parts.Source = tc.src
			err := rg.r.Run(context.Background())
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrNoDocuments) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want ErrNoDocuments with %q", err, tc.wantErr)
			}
		})
	}
	// One input, even a bad one, is a run that read something.
	rg := newRig(t, t.TempDir(), corpus(1)[:0], Options{})
	rg.src.docs = append(rg.src.docs, corpus(1)...)
	if err := rg.r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// The sources' text policy counts reach the run summary.
func TestSummaryCarriesTextRepairs(t *testing.T) {
	rg := newRig(t, t.TempDir(), corpus(2), Options{})
	if err := rg.r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	var s engine.Summary
	rg.r.Summarize(&s, connectors.SourceStats{Text: map[string]int64{"repaired_utf8": 3}})
	if !strings.Contains(string(s.JSON()), `"repaired_utf8": 3`) {
		t.Fatalf("summary %s", s.JSON())
	}
	rg.r.Summarize(&s, connectors.SourceStats{})
	if !strings.Contains(string(s.JSON()), `"text_repairs": {}`) {
		t.Fatalf("summary without repairs %s", s.JSON())
	}
}

// The summary says how much memory the run held.
func TestSummaryCarriesMemory(t *testing.T) {
	rg := newRig(t, t.TempDir(), corpus(2), Options{})
	if err := rg.r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	var s engine.Summary
	rg.r.Summarize(&s, connectors.SourceStats{})
	if s.PeakRSSMiB == -1 {
		t.Skip("no /proc/self/status on this platform")
	}
	if s.PeakRSSMiB <= 0 || s.GoMiB <= 0 {
		t.Fatalf("peak_rss_mib %v, go_memory_mib %v", s.PeakRSSMiB, s.GoMiB)
	}
	if !strings.Contains(string(s.JSON()), `"peak_rss_mib"`) {
		t.Fatalf("summary %s", s.JSON())
	}
}

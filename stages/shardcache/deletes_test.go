package shardcache

import (
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/reignpipe/reignpipe/schemas"
)

func man(o Options, id, version string) Manifest {
	return Manifest{DocID: id, Version: version, Fingerprint: o.Fingerprint, K: o.K, S: o.S, Keys: []uint64{1, 2}}
}

// manifestState is what every manifest reader says of id: its version, or "-" when the
// document has none. Manifest and ScanManifests must agree.
func manifestState(t *testing.T, c *Cache, id string) string {
	t.Helper()
	m, ok, err := c.Manifest(id)
	if err != nil {
		t.Fatal(err)
	}
	scanned := "-"
	if err := c.ScanManifests(func(s Manifest) error {
		if s.DocID == id {
			scanned = s.Version
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	got := "-"
	if ok {
		got = m.Version
	}
	if got != scanned {
		t.Fatalf("%s: Manifest says %q, ScanManifests %q", id, got, scanned)
	}
	return got
}

// TestDeleteVersionRule walks the version rule: each step is an upsert (put) or a deletion
// (del) of one document, then what the manifest readers see, whether the cache remembers a
// deletion superseding version "5", and what PutManifest said. Every case runs with a Flush
// between steps and without, and once more after a reopen.
func TestDeleteVersionRule(t *testing.T) {
	type step struct {
		op, version string
		wantErr     error // PutManifest's answer
	}
	cases := []struct {
		name      string
		steps     []step
		want      string // manifest version after the steps, "-" for none
		remembers bool   // Superseded("5")
	}{
		{"delete removes the stored version", []step{{"put", "3", nil}, {"del", "3", nil}}, "-", false},
		{"delete removes an older version", []step{{"put", "3", nil}, {"del", "7", nil}}, "-", true},
		{"older delete leaves a newer version", []step{{"put", "9", nil}, {"del", "7", nil}}, "9", false},
		{"stale upsert after delete stays out", []step{{"put", "3", nil}, {"del", "7", nil}, {"put", "5", ErrSuperseded}}, "-", true},
		{"same-version upsert after delete stays out", []step{{"del", "7", nil}, {"put", "7", ErrSuperseded}}, "-", true},
		{"newer upsert brings it back", []step{{"put", "3", nil}, {"del", "7", nil}, {"put", "8", nil}}, "8", false},
		{"newer upsert then stale one", []step{{"del", "7", nil}, {"put", "8", nil}, {"put", "6", nil}}, "6", false},
		{"delete before any upsert is remembered", []step{{"del", "7", nil}, {"put", "2", ErrSuperseded}}, "-", true},
		{"delete without version removes any", []step{{"put", "99", nil}, {"del", "", nil}}, "-", false},
		{"delete without version is not remembered", []step{{"put", "9", nil}, {"del", "", nil}, {"put", "1", nil}}, "1", false},
		{"delete without version keeps a remembered one", []step{{"del", "7", nil}, {"del", "", nil}, {"put", "6", ErrSuperseded}}, "-", true},
		{"older delete after a newer one keeps the newer", []step{{"del", "7", nil}, {"del", "3", nil}, {"put", "6", ErrSuperseded}}, "-", true},
		{"numeric versions", []step{{"put", "9", nil}, {"del", "10", nil}, {"put", "9", ErrSuperseded}}, "-", true},
		{"date versions", []step{{"put", "2026-01-01", nil}, {"del", "2026-02-01", nil}, {"put", "2026-01-15", ErrSuperseded}, {"put", "2026-03-01", nil}}, "2026-03-01", false},
	}
	for _, flushEach := range []bool{false, true} {
		for _, tc := range cases {
			t.Run(fmt.Sprintf("%s/flush=%v", tc.name, flushEach), func(t *testing.T) {
				o := testOpts(t, t.TempDir(), nil)
				c := mustOpen(t, o)
				defer func() { _ = c.Close() }()
				const id = "doc:1"
				for _, s := range tc.steps {
					var err error
					if s.op == "put" {
						err = c.PutManifest(man(o, id, s.version))
					} else {
						err = c.DeleteManifest(schemas.Deletion{DocID: id, Version: s.version})
					}
					if !errors.Is(err, s.wantErr) || (s.wantErr == nil) != (err == nil) {
						t.Fatalf("%s %q: %v, want %v", s.op, s.version, err, s.wantErr)
					}
					if flushEach {
						if err := c.Flush(); err != nil {
							t.Fatal(err)
						}
					}
				}
				check := func(when string) {
					if got := manifestState(t, c, id); got != tc.want {
						t.Errorf("%s: manifest %q, want %q", when, got, tc.want)
					}
					if got, err := c.Superseded(id, "5"); err != nil || got != tc.remembers {
						t.Errorf("%s: Superseded(5) = %v, %v, want %v", when, got, err, tc.remembers)
					}
				}
				check("open")
				if err := c.Close(); err != nil {
					t.Fatal(err)
				}
				c = mustOpen(t, o)
				check("reopened")
			})
		}
	}
}

// A deletion is one more pending write: durable at Flush with the manifests, so a cache
// closed without it (a crash) keeps the document, and one reopened after it does not.
func TestDeleteDurableAtFlush(t *testing.T) {
	o := testOpts(t, t.TempDir(), nil)
	c := mustOpen(t, o)
	for _, id := range []string{"a:1", "a:2", "a:3"} {
		if err := c.PutManifest(man(o, id, "1")); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteManifest(schemas.Deletion{DocID: "a:2", Version: "1"}); err != nil {
		t.Fatal(err)
	}
	// Not flushed: the readers already leave it out.
	if got := manifestState(t, c, "a:2"); got != "-" {
		t.Fatalf("a:2 before Flush: %q", got)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c = mustOpen(t, o)
	defer c.Close()
	var ids []string
	if err := c.ScanManifests(func(m Manifest) error { ids = append(ids, m.DocID); return nil }); err != nil {
		t.Fatal(err)
	}
	sort.Strings(ids)
	if len(ids) != 2 || ids[0] != "a:1" || ids[1] != "a:3" {
		t.Fatalf("after reopen the manifests are %v, want a:1 a:3", ids)
	}
	ts, ok, err := c.Tombstone("a:2")
	if err != nil || !ok || ts.Version != "1" || time.Since(time.Unix(0, ts.When)) > time.Minute {
		t.Fatalf("Tombstone(a:2) = %+v, %v, %v", ts, ok, err)
	}
}

// The windows of a deleted document stay: they are content-addressed and another document
// (or the same one back at a newer version) may use them.
func TestDeleteKeepsWindows(t *testing.T) {
	o := testOpts(t, t.TempDir(), nil)
	c := mustOpen(t, o)
	defer c.Close()
	rows := testRows(5, testDim, 7)
	m := man(o, "doc:0", "1")
	m.Keys = nil
	for _, r := range rows {
		if _, err := c.Add(r); err != nil {
			t.Fatal(err)
		}
		m.Keys = append(m.Keys, r.Key)
	}
	if err := c.PutManifest(m); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteManifest(schemas.Deletion{DocID: "doc:0", Version: "1"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	checkGet(t, c, rows)
}

// An expired deletion counts as absent: an older upsert is accepted again, and the tombstone
// is gone from the index once touched and flushed.
func TestDeleteRetentionExpires(t *testing.T) {
	o := testOpts(t, t.TempDir(), nil)
	o.DeleteRetention = 300 * time.Millisecond
	c := mustOpen(t, o)
	for _, id := range []string{"x:1", "x:2"} {
		if err := c.DeleteManifest(schemas.Deletion{DocID: id, Version: "5"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := c.PutManifest(man(o, "x:1", "4")); !errors.Is(err, ErrSuperseded) {
		t.Fatalf("within retention: %v, want ErrSuperseded", err)
	}
	time.Sleep(o.DeleteRetention + 50*time.Millisecond)
	if ok, err := c.Superseded("x:2", "4"); ok || err != nil {
		t.Fatalf("expired Superseded = %v, %v", ok, err)
	}
	if err := c.PutManifest(man(o, "x:1", "4")); err != nil {
		t.Fatalf("expired: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	// With a long retention after the reopen, a tombstone left on disk would count again:
	// both were dropped when touched.
	o.DeleteRetention = time.Hour
	c = mustOpen(t, o)
	defer c.Close()
	for _, id := range []string{"x:1", "x:2"} {
		if _, ok, err := c.Tombstone(id); ok || err != nil {
			t.Errorf("Tombstone(%s) after expiry and reopen = %v, %v", id, ok, err)
		}
	}
	if got := manifestState(t, c, "x:1"); got != "4" {
		t.Errorf("x:1 manifest %q, want 4", got)
	}
}

func TestDeleteRefusesEmptyID(t *testing.T) {
	c := mustOpen(t, testOpts(t, t.TempDir(), nil))
	defer c.Close()
	if err := c.DeleteManifest(schemas.Deletion{Version: "1"}); err == nil {
		t.Fatal("DeleteManifest with no doc id accepted")
	}
}

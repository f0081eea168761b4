// Package verify checks what a pipeline has on disk -- the chunk cache, the vector outputs and
// the state folder -- and with repair puts it right as far as it can without the GN: damaged
// shards are quarantined and their windows become misses (the next run embeds them again),
// stale index entries are dropped, and temp files a killed process left are removed.
package verify

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/reignpipe/reignpipe/connectors/vectorfile"
	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/schemas"
	"github.com/reignpipe/reignpipe/stages/shardcache"
)

// Output is one vector sink's folder.
type Output struct {
	Dir string `json:"dir"`
	// Vectors counts the documents the folder holds: the newest row of each doc id, deleted
	// ones left out.
	Vectors int64  `json:"vectors"`
	Error   string `json:"error,omitempty"`
	// NoManifest counts vectors whose document has no manifest in the cache (the first few
	// listed): reaggregate cannot rebuild them until a `run --from-scratch` writes the
	// manifests again (from cached windows: no GN).
	NoManifest     int64    `json:"docs_without_manifest,omitempty"`
	NoManifestDocs []string `json:"docs_without_manifest_list,omitempty"`
}

// Report is what Run found (and did, with repair).
type Report struct {
	Pipeline string                   `json:"pipeline"`
	Cache    *shardcache.VerifyReport `json:"cache,omitempty"`
	CacheErr string                   `json:"cache_error,omitempty"`
	Outputs  []Output                 `json:"outputs"`
	Temps    []string                 `json:"temp_files"` // crash leftovers (removed with repair)
	Repair   bool                     `json:"repair"`
	// ReembedWindows is how many windows the next run will send to the GN again because their
	// rows were quarantined or lost.
	ReembedWindows int64 `json:"windows_to_reembed"`
}

// OK: nothing is wrong (or, after a repair, nothing is left that the next run does not heal).
func (r Report) OK() bool {
	if r.CacheErr != "" {
		return false
	}
	for _, o := range r.Outputs {
		if o.Error != "" || o.NoManifest > 0 {
			return false
		}
	}
	if r.Repair {
		return true
	}
	return len(r.Temps) == 0 && (r.Cache == nil || r.Cache.OK())
}

// Run verifies cfg's cache, outputs and state folder; with repair it also fixes what it can.
func Run(cfg *pipelines.Config, repair bool) (Report, error) {
	rep := Report{Pipeline: cfg.Name, Repair: repair, Outputs: []Output{}, Temps: []string{}}
	c, err := openCache(cfg.Cache.Dir)
	if err != nil {
		rep.CacheErr = err.Error()
	}
	if c != nil {
		defer c.Close()
		cr, err := c.Verify(repair)
		if err != nil {
			rep.CacheErr = err.Error()
		} else {
			rep.Cache = &cr
			rep.ReembedWindows = cr.MissingKeys
			for _, d := range cr.Damaged {
				rep.ReembedWindows += d.Rows
			}
		}
	}
	// An embedded run puts a document's manifest in the cache before its vector reaches a
	// sink, so a vector without one means manifests were lost (a damaged index): reaggregate
	// would silently leave those documents out. The stages of a distributed pipeline keep no
	// manifests, so there is nothing to cross-check.
	var manifests *shardcache.Cache
	if rep.Cache != nil && cfg.Transport.Type != "kafka" {
		manifests = c
	}
	for _, s := range cfg.Sinks {
		dir := s.Dir()
		if dir == "" {
			continue // kafka, pgvector
		}
		o := Output{Dir: dir}
		// The documents the output holds: a deleted one's older rows stay in the parts, and its
		// manifest is gone with it.
		docs := vectorfile.NewFold[struct{}]()
		err := vectorfile.ReadVectors(dir, func(v schemas.DocVector, deleted bool) error {
			docs.Add(v.DocID, v.Version, deleted, struct{}{})
			return nil
		})
		var live []string
		docs.Live(func(id string, _ struct{}) { live = append(live, id) })
		slices.Sort(live)
		o.Vectors = int64(len(live))
		for _, id := range live {
			if err != nil || manifests == nil {
				break
			}
			var ok bool
			if _, ok, err = manifests.Manifest(id); err == nil && !ok {
				if o.NoManifest < maxListed {
					o.NoManifestDocs = append(o.NoManifestDocs, id)
				}
				o.NoManifest++
			}
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			o.Error = err.Error()
		}
		rep.Outputs = append(rep.Outputs, o)
		rep.Temps = append(rep.Temps, glob(dir, ".part-*.tmp", "part-*.tmp")...)
	}
	rep.Temps = append(rep.Temps, glob(cfg.Run.StateDir, ".tmp-*")...)
	if repair {
		for _, p := range rep.Temps {
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				return rep, fmt.Errorf("verify: remove %s: %w", p, err)
			}
		}
	}
	return rep, nil
}

const maxListed = 20

// openCache opens the cache in the space it was built for (read from its own index: no GN
// needed). No cache yet is (nil, nil); shards without an index is an error saying what the next
// run does about it.
func openCache(dir string) (*shardcache.Cache, error) {
	if _, err := os.Stat(filepath.Join(dir, "index")); err != nil {
		if shards := glob(filepath.Join(dir, "shards"), "*.parquet"); len(shards) > 0 {
			return nil, fmt.Errorf("%s holds %d shards but no index: the next run rebuilds the index from the shards (no GN), "+
				"but the document manifests reaggregate reads are lost until `reignpipe run --from-scratch` writes them again", dir, len(shards))
		}
		return nil, nil
	}
	fp, dim, k, s, err := shardcache.ReadSpace(dir)
	if err != nil {
		return nil, err
	}
	return shardcache.Open(shardcache.Options{Dir: dir, Fingerprint: fp, Dim: dim, K: k, S: s})
}

func glob(dir string, patterns ...string) []string {
	var out []string
	for _, p := range patterns {
		m, _ := filepath.Glob(filepath.Join(dir, p))
		out = append(out, m...)
	}
	return out
}

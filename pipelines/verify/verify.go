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

	"github.com/reignpipe/reignpipe/connectors/vectorfile"
	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/schemas"
	"github.com/reignpipe/reignpipe/stages/shardcache"
)

// Output is one vector sink's folder.
type Output struct {
	Dir     string `json:"dir"`
	Vectors int64  `json:"vectors"`
	Error   string `json:"error,omitempty"`
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
		if o.Error != "" {
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
	if _, err := os.Stat(filepath.Join(cfg.Cache.Dir, "index")); err == nil {
		cr, err := cache(cfg.Cache.Dir, repair)
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
	for _, s := range cfg.Sinks {
		if s.Dir == "" {
			continue // kafka
		}
		o := Output{Dir: s.Dir}
		err := vectorfile.ReadVectors(s.Dir, func(schemas.DocVector) error { o.Vectors++; return nil })
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			o.Error = err.Error()
		}
		rep.Outputs = append(rep.Outputs, o)
		rep.Temps = append(rep.Temps, glob(s.Dir, ".part-*.tmp", "part-*.tmp")...)
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

// cache opens the cache in the space it was built for (read from its own index: no GN needed)
// and verifies it.
func cache(dir string, repair bool) (shardcache.VerifyReport, error) {
	fp, dim, k, s, err := shardcache.ReadSpace(dir)
	if err != nil {
		return shardcache.VerifyReport{}, err
	}
	c, err := shardcache.Open(shardcache.Options{Dir: dir, Fingerprint: fp, Dim: dim, K: k, S: s})
	if err != nil {
		return shardcache.VerifyReport{}, err
	}
	rep, err := c.Verify(repair)
	return rep, errors.Join(err, c.Close())
}

func glob(dir string, patterns ...string) []string {
	var out []string
	for _, p := range patterns {
		m, _ := filepath.Glob(filepath.Join(dir, p))
		out = append(out, m...)
	}
	return out
}

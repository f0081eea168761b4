package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/reignpipe/reignpipe/stages/shardcache"
)

// stageSummary reads the JSON summary a stage process printed on its standard output as it
// ended (the last incarnation's: a killed process prints none).
func stageSummary(stdout string) (summary, error) {
	var s summary
	// The summary is indented JSON: its opening brace is the only one at the start of a line
	// (nested objects are indented).
	i := strings.LastIndex("\n"+stdout, "\n{\n")
	if i < 0 {
		return s, errors.New("no summary on standard output")
	}
	if err := json.Unmarshal([]byte(stdout[i:]), &s); err != nil {
		return s, fmt.Errorf("summary: %w", err)
	}
	return s, nil
}

// checkStageSummaries holds the stages' summaries to the promises of the embedded summary:
// ingest (never killed) accounts for every input of the corpus, with the clean run's dead
// letters and no more; the last embed and aggregate incarnations, soft-stopped once every
// vector was published, ended without an error, dead-lettered nothing and account for every input
// they read.
func (c *Campaign) checkStageSummaries(stdout map[string]string) error {
	var problems []string
	for _, name := range []string{"ingest", "embed-a", "embed-b", "aggregate"} {
		s, err := stageSummary(stdout[name])
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", name, err))
			continue
		}
		failed := s.DocsFailed
		// Ingest ends by itself (--idle-exit); the others are stopped by SIGTERM, a stage's
		// normal end.
		want := "completed"
		if name != "ingest" {
			want = "stopped"
		}
		if s.Error != "" || s.Stopped != want {
			problems = append(problems, fmt.Sprintf("%s stopped %q, want %q: %s", name, s.Stopped, want, s.Error))
		}
		if !addsUp(s) {
			problems = append(problems, fmt.Sprintf("%s: %d inputs read, %d accounted for (%d written + %d deleted + %d dead-lettered + %d resumed + %d abandoned + %d revoked + %d superseded)",
				name, s.InputsRead, s.Accounted(), s.DocsWritten, s.DocsDeleted, failed, s.DocsResumed, s.Abandoned, s.Revoked, s.Superseded))
		}
		if name == "ingest" && (s.DocsWritten != c.refWritten || s.DocsDeleted != c.refDeleted || failed != c.refFailed) {
			problems = append(problems, fmt.Sprintf("ingest wrote %d documents, deleted %d and dead-lettered %d, the clean run %d, %d and %d",
				s.DocsWritten, s.DocsDeleted, failed, c.refWritten, c.refDeleted, c.refFailed))
		}
		if name != "ingest" && failed != 0 {
			problems = append(problems, fmt.Sprintf("%s dead-lettered %d inputs of a good corpus", name, failed))
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// crashTemps counts temp files left anywhere under dir once every stage has stopped: the
// shard writers' *.tmp, atomicfile's hidden .tmp-*, and the vector sinks' .part-*.tmp.
func crashTemps(dir string) (int, []string) {
	var found []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		n := d.Name()
		if strings.HasSuffix(n, ".tmp") || strings.HasPrefix(n, ".tmp-") {
			found = append(found, p)
		}
		return nil
	})
	return len(found), found
}

// uncachedWindows opens every embed worker's cache (after they stopped), verifies it, and counts
// the clean run's windows that none of them holds: the windows a rerun could have to send to
// the GN again, whichever worker its partitions land on. The clean run's cache has a manifest
// (the ordered window keys) per document; the workers' caches are keyed the same way.
func uncachedWindows(refCache string, workers []string) (int64, error) {
	open := func(dir string) (*shardcache.Cache, int, error) {
		fp, dim, k, s, err := shardcache.ReadSpace(dir)
		if err != nil {
			return nil, 0, err
		}
		c, err := shardcache.Open(shardcache.Options{Dir: dir, Fingerprint: fp, Dim: dim, K: k, S: s})
		return c, dim, err
	}
	ref, _, err := open(refCache)
	if err != nil {
		return 0, fmt.Errorf("clean run's cache: %w", err)
	}
	var keys []uint64
	seen := map[uint64]bool{}
	err = ref.ScanManifests(func(m shardcache.Manifest) error {
		for _, k := range m.Keys {
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
		return nil
	})
	if cerr := ref.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, fmt.Errorf("clean run's manifests: %w", err)
	}
	if len(keys) == 0 {
		return 0, errors.New("the clean run's cache has no manifests")
	}
	held := map[uint64]bool{}
	for _, dir := range workers {
		c, dim, err := open(dir)
		if err != nil {
			return 0, fmt.Errorf("reopening %s: %w", dir, err)
		}
		rep, err := c.Verify(false)
		if err == nil && !rep.OK() {
			err = fmt.Errorf("verify found %d problems: %+v", rep.ProblemCount, rep)
		}
		dst := make([]float32, dim)
		for _, k := range keys {
			if err != nil {
				break
			}
			var ok bool
			if ok, err = c.Get(k, dst); ok {
				held[k] = true
			}
		}
		if cerr := c.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return 0, fmt.Errorf("%s: %w", dir, err)
		}
	}
	return int64(len(keys) - len(held)), nil
}

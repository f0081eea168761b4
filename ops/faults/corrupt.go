package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
)

// CorruptFaults damage a finished store in each way the campaign knows.
func (c *Campaign) CorruptFaults() []Fault {
	var out []Fault
	for _, k := range []string{"companion bit", "unreadable shard", "deleted shard", "vector part digit", "index removed", "index log bit", "key table bit"} {
		out = append(out, Fault{Name: "corrupt: " + k, Corrupt: k})
	}
	return out
}

// corrupt damages the trial's store: one bit of the first companion's first row, the first
// Parquet shard truncated with its companion gone (nothing to rebuild from), the first shard's
// files deleted by hand, one digit of the first JSONL vector part, the cache's index folder
// removed, one bit in the middle of the index's write-ahead log (the fixture's index is
// small enough to live there; Pebble drops a damaged log's tail when it opens), or one bit in
// the key table (index.hash) that maps window keys to their rows.
func corrupt(dir, kind string) error {
	first := func(pattern string) (string, error) {
		m, _ := filepath.Glob(filepath.Join(dir, pattern))
		sort.Strings(m)
		if len(m) == 0 {
			return "", fmt.Errorf("corrupt %s: nothing matches %s", kind, pattern)
		}
		return m[0], nil
	}
	switch kind {
	case "companion bit":
		p, err := first("cache/shards/*.vec")
		if err != nil {
			return err
		}
		return flip(p, 32+16+5) // header, row header, inside the first embedding
	case "unreadable shard", "deleted shard":
		p, err := first("cache/shards/*.parquet")
		if err != nil {
			return err
		}
		vec := p[:len(p)-len(".parquet")] + ".vec"
		if err := os.Remove(vec); err != nil {
			return err
		}
		if kind == "deleted shard" {
			return os.Remove(p)
		}
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		return os.Truncate(p, st.Size()/2)
	case "index removed":
		return os.RemoveAll(filepath.Join(dir, "cache", "index"))
	case "index log bit":
		logs, _ := filepath.Glob(filepath.Join(dir, "cache", "index", "*.log"))
		var biggest string
		var size int64
		for _, p := range logs {
			if st, err := os.Stat(p); err == nil && st.Size() > size {
				biggest, size = p, st.Size()
			}
		}
		if size < 64 {
			return fmt.Errorf("corrupt %s: no write-ahead log with records in the index", kind)
		}
		return flip(biggest, size/2)
	case "key table bit":
		p := filepath.Join(dir, "cache", "index.hash")
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		// A byte inside the first bucket page past the header page: an entry's key or place.
		return flip(p, min(st.Size()-1, 4096+100))
	case "vector part digit":
		p, err := first("vectors-jsonl/part-*.jsonl")
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for i := len(b) / 2; i < len(b); i++ {
			if b[i] >= '0' && b[i] <= '8' {
				b[i]++
				return os.WriteFile(p, b, 0o644)
			}
		}
		return errors.New("corrupt: no digit in the vector part")
	}
	return fmt.Errorf("corrupt: unknown kind %q", kind)
}

func flip(path string, at int64) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if at >= int64(len(b)) {
		return fmt.Errorf("corrupt: %s has %d bytes, no byte %d", path, len(b), at)
	}
	b[at] ^= 0x10
	return os.WriteFile(path, b, 0o644)
}

// verifyFinds runs `reignpipe verify` on the damaged trial's pipeline: it must exit 1, the
// damage found.
func (c *Campaign) verifyFinds(dir string) error {
	cmd := exec.Command(c.Bin, "verify", filepath.Join(dir, "pipeline.yaml"))
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 1 {
		return nil
	}
	return fmt.Errorf("verify of the damaged store: want exit 1, got %v\n%s", err, tail(string(out)))
}

// verifyRepair runs `reignpipe verify --repair` on the trial's pipeline; it must end OK.
func (c *Campaign) verifyRepair(dir string) error {
	out, err := exec.Command(c.Bin, "verify", "--repair", filepath.Join(dir, "pipeline.yaml")).CombinedOutput()
	if err != nil {
		return fmt.Errorf("verify --repair: %v\n%s", err, tail(string(out)))
	}
	return nil
}

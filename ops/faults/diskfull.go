package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/reignpipe/reignpipe/connectors/vectorfile"
)

// DiskFullFaults fill, in turn, the filesystem under each writer's folder.
func (c *Campaign) DiskFullFaults() []Fault {
	var out []Fault
	for _, d := range []string{"cache", "vectors", "vectors-jsonl", "state"} {
		out = append(out, Fault{Name: "disk full: " + d, DiskFull: d})
	}
	return out
}

// CanFillDisks reports whether this process may mount the small filesystems the disk-full
// trials use (root, and a kernel that lets it mount tmpfs).
func CanFillDisks() error {
	if os.Geteuid() != 0 {
		return errors.New("disk-full trials mount tmpfs and need root")
	}
	d, err := os.MkdirTemp("", "faults-mount-")
	if err != nil {
		return err
	}
	defer os.Remove(d)
	if err := syscall.Mount("tmpfs", d, "tmpfs", 0, "size=1m"); err != nil {
		return fmt.Errorf("cannot mount tmpfs: %w", err)
	}
	return syscall.Unmount(d, 0)
}

// fillDisk runs the pipeline with folder on a 64 MiB tmpfs, fills that filesystem once the
// run has committed something, and waits for the run to fail. It reports whether the run met
// ENOSPC (and said so); the filler is removed afterwards, so the final run has space again.
// The mount stays until the trial folder is removed (see unmountAll).
func (c *Campaign) fillDisk(dir, folder string) (bool, error) {
	mnt := filepath.Join(dir, folder)
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return false, err
	}
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=64m"); err != nil {
		return false, fmt.Errorf("mount tmpfs on %s: %w", mnt, err)
	}
	cmd, out, err := c.start(dir)
	if err != nil {
		return false, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// Fill once the first commit is there, so the run is past its start-up writes.
	deadline := time.Now().Add(c.Timeout)
	filled := false
	filler := filepath.Join(mnt, ".filler")
	for !filled {
		select {
		case err := <-done:
			return false, fmt.Errorf("run ended (%v) before the disk was filled:\n%s", err, tail(out.String()))
		case <-time.After(5 * time.Millisecond):
		}
		if m, _ := filepath.Glob(filepath.Join(dir, "vectors", "part-*")); len(m) > 0 || time.Now().After(deadline) {
			if err := fill(filler); err != nil {
				return false, err
			}
			filled = true
		}
	}
	var runErr error
	select {
	case runErr = <-done:
	case <-time.After(c.Timeout):
		_ = cmd.Process.Kill()
		<-done
		return false, fmt.Errorf("run on a full disk did not end in %v:\n%s", c.Timeout, tail(out.String()))
	}
	// Whatever the full disk stopped, what is visible must be whole and readable.
	for _, d := range []string{"vectors", "vectors-jsonl"} {
		if _, err := vectorfile.Latest(filepath.Join(dir, d)); err != nil {
			return false, fmt.Errorf("after the disk filled, %s is not readable: %w", d, err)
		}
	}
	if err := os.Remove(filler); err != nil {
		return false, err
	}
	said := strings.Contains(out.String(), "no space left on device")
	if runErr == nil {
		// The run needed no more space in that folder after it filled: nothing to check.
		return false, nil
	}
	if !said {
		return false, fmt.Errorf("run on a full %s failed without saying the disk is full (%v):\n%s", folder, runErr, tail(out.String()))
	}
	return true, nil
}

// fill writes until the filesystem has no space left.
func fill(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return nil
			}
			return err
		}
	}
}

// unmountAll unmounts the disk-full trials' filesystems under dir.
func unmountAll(dir string) {
	for _, d := range []string{"cache", "vectors", "vectors-jsonl", "state"} {
		p := filepath.Join(dir, d)
		if err := syscall.Unmount(p, 0); err != nil && !errors.Is(err, syscall.EINVAL) {
			_ = exec.Command("umount", "-l", p).Run()
		}
	}
}

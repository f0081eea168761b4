package vecfile

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

const dim = 6

func sample(rows int) ([]uint64, []float32) {
	keys := make([]uint64, rows)
	emb := make([]float32, rows*dim)
	for i := range keys {
		keys[i] = uint64(i+1) * 0x9E3779B97F4A7C15
		for j := 0; j < dim; j++ {
			emb[i*dim+j] = float32(i)*0.5 - float32(j) + 1e-39 // a subnormal tail keeps bits honest
		}
	}
	emb[1] = float32(math.Copysign(0, -1))
	return keys, emb
}

func pathIn(dir string) func(uint64) string {
	return func(seq uint64) string { return filepath.Join(dir, "c.vec") }
}

// FuzzRead flips one byte of a companion anywhere: every row read must then be either an
// error or exactly the row written, never another vector.
func FuzzRead(f *testing.F) {
	keys, emb := sample(4)
	f.Add(0, byte(0))
	f.Add(HeaderSize+3, byte(1))
	f.Add(HeaderSize+int(Stride(dim))+RowHeader+2, byte(0x80))
	f.Add(9, byte(0xff))
	f.Fuzz(func(t *testing.T, at int, flip byte) {
		dir := t.TempDir()
		path := pathIn(dir)(7)
		if _, err := Write(path, 7, dim, keys, emb); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if at < 0 {
			at = -at
		}
		data[at%len(data)] ^= flip
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		p := NewPool(pathIn(dir), dim, 2)
		defer p.CloseAll()
		fh, err := p.Acquire(7)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Acquire: %v, want ErrCorrupt", err)
			}
			return
		}
		defer p.Release(fh)
		dst := make([]float32, dim)
		for i, k := range keys {
			err := p.Read(fh, int32(i), k, dst)
			if err != nil {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("row %d: %v, want ErrCorrupt", i, err)
				}
				continue
			}
			for j := range dst {
				if math.Float32bits(dst[j]) != math.Float32bits(emb[i*dim+j]) {
					t.Fatalf("flip %#x at %d: row %d served a wrong vector", flip, at%len(data), i)
				}
			}
		}
	})
}

func TestPoolBoundsOpenFiles(t *testing.T) {
	dir := t.TempDir()
	keys, emb := sample(3)
	path := func(seq uint64) string { return filepath.Join(dir, string(rune('a'+seq))+".vec") }
	for seq := uint64(0); seq < 5; seq++ {
		if _, err := Write(path(seq), seq, dim, keys, emb); err != nil {
			t.Fatal(err)
		}
	}
	p := NewPool(path, dim, 2)
	held, err := p.Acquire(0) // held across evictions: must stay readable
	if err != nil {
		t.Fatal(err)
	}
	dst := make([]float32, dim)
	for seq := uint64(1); seq < 5; seq++ {
		f, err := p.Acquire(seq)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Read(f, 2, keys[2], dst); err != nil {
			t.Fatal(err)
		}
		p.Release(f)
		if n := len(p.open); n > 2 {
			t.Fatalf("%d files open, bound is 2", n)
		}
	}
	if err := p.Read(held, 1, keys[1], dst); err != nil {
		t.Fatalf("read on an evicted but held file: %v", err)
	}
	if err := p.Read(held, 3, keys[0], dst); !errors.Is(err, ErrCorrupt) {
		t.Errorf("row past the end: %v", err)
	}
	p.Release(held)
	if err := p.Read(held, 1, keys[1], dst); err == nil {
		t.Error("read after the last release of an evicted file succeeded: it was not closed")
	}
	p.CloseAll()
}

// The pool's default follows the descriptor limit: a quarter of it, within 64 and 4096.
func TestDefaultOpenFollowsTheLimit(t *testing.T) {
	var saved unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &saved); err != nil {
		t.Skip("no RLIMIT_NOFILE:", err)
	}
	defer unix.Setrlimit(unix.RLIMIT_NOFILE, &saved)
	for _, c := range []struct{ cur, want uint64 }{{100, 64}, {1024, 256}, {8000, 2000}, {min(saved.Max, 1<<20), min(saved.Max/4, 4096)}} {
		if c.cur > saved.Max {
			continue // cannot be raised past the hard limit
		}
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: c.cur, Max: saved.Max}); err != nil {
			t.Fatal(err)
		}
		if got := DefaultOpen(); uint64(got) != max(c.want, 64) {
			t.Errorf("limit %d: %d open files, want %d", c.cur, got, max(c.want, 64))
		}
	}
}

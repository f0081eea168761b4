package memstat

import (
	"runtime"
	"testing"
)

// A 64 MiB allocation that is touched must show in the Go side and in the resident set, and
// the peak can never be below the current figure.
func TestReadSeesAnAllocation(t *testing.T) {
	before := Read()
	if before.RSS < 0 {
		t.Skip("no /proc/self/status on this platform")
	}
	buf := make([]byte, 64<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	after := Read()
	runtime.KeepAlive(buf)
	if d := after.GoHeap - before.GoHeap; d < 60<<20 {
		t.Errorf("Go heap grew %d bytes after a 64 MiB allocation", d)
	}
	if d := after.RSS - before.RSS; d < 60<<20 {
		t.Errorf("RSS grew %d bytes after touching 64 MiB", d)
	}
	if after.PeakRSS < after.RSS || after.Go < after.GoHeap {
		t.Errorf("inconsistent snapshot %+v", after)
	}
	if MiB(-1) != -1 || MiB(1<<20) != 1 {
		t.Error("MiB")
	}
}

func TestKiB(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"\t  123456 kB", 123456 << 10},
		{" 0 kB", 0},
		{" 12", 12 << 10},
		{" lots kB", -1},
		{"", -1},
	} {
		if got := kiB(c.in); got != c.want {
			t.Errorf("kiB(%q) = %d, want %d", c.in, got, c.want)
		}
	}
}

package commitpolicy

import (
	"testing"
	"time"
)

func TestDefaults(t *testing.T) {
	for _, tc := range []struct {
		every        int
		interval     time.Duration
		wantEvery    int
		wantInterval time.Duration
	}{
		{0, 0, Every, Interval},
		{-1, -time.Second, Every, Interval},
		{4, time.Second, 4, time.Second},
	} {
		e, i := tc.every, tc.interval
		Defaults(&e, &i)
		if e != tc.wantEvery || i != tc.wantInterval {
			t.Errorf("Defaults(%d, %v) = %d, %v; want %d, %v", tc.every, tc.interval, e, i, tc.wantEvery, tc.wantInterval)
		}
	}
}

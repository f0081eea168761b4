package promtext

import "testing"

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:9090": true, "localhost:9090": true, "[::1]:9090": true, "127.0.0.2:1": true,
		":9090": false, "0.0.0.0:9090": false, "[::]:9090": false, "10.1.2.3:9090": false, "9090": false,
	} {
		if got := Loopback(addr); got != want {
			t.Errorf("Loopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

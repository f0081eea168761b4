package schemas

import "testing"

func TestCompareVersions(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"9", "10", -1}, {"10", "9", 1}, {"007", "7", 0}, {"1", "1", 0},
		{"2024-01-02", "2023-12-31", 1}, {"2024-01-02A1", "2024-01-02B2", -1}, {"", "1", -1}, {"abc", "abd", -1},
	}
	for _, tc := range tests {
		if got := CompareVersions(tc.a, tc.b); got != tc.want {
			t.Errorf("CompareVersions(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

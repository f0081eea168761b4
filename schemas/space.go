package schemas

import (
	"fmt"
	"strings"
)

// Space is a chunk-embedding space: the GN that embedded the windows (its fingerprint and
// dimension) and the window setting (K, S). Two windows' embeddings are comparable, and a
// cache, a store topic or an aggregation may mix them, only when their spaces are equal: a
// REIGN model fed another GN's embeddings gives confident nonsense.
type Space struct {
	Fingerprint string
	Dim, K, S   int
}

func (s Space) String() string {
	return fmt.Sprintf("fingerprint=%q dim=%d K=%d S=%d", s.Fingerprint, s.Dim, s.K, s.S)
}

// CompareVersions orders Document.Version strings, the one order every output and store
// keeps ("a newer version replaces an older one"): two all-digit versions (revision ids)
// compare as numbers, since "10" must beat "9"; anything else (dates, date+kind) compares as
// strings, which orders ISO dates correctly. The pgvector sink's SQL function
// <prefix>_version_cmp reproduces it.
func CompareVersions(a, b string) int {
	if isDigits(a) && isDigits(b) {
		a, b = strings.TrimLeft(a, "0"), strings.TrimLeft(b, "0")
		if len(a) != len(b) {
			if len(a) < len(b) {
				return -1
			}
			return 1
		}
	}
	return strings.Compare(a, b)
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

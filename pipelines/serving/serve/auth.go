package serve

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"os"
	"strings"
)

// KeyEnv is the environment variable serve reads API keys from (one or more, separated by
// commas or whitespace), beside or instead of a key file. Keys are never taken on the command
// line: every user of the machine can read a process's arguments.
const KeyEnv = "REIGNPIPE_API_KEY"

// minKeyLen refuses keys short enough to guess.
const minKeyLen = 16

// Keys are the API keys a server accepts, kept as their SHA-256 digests: every check compares
// fixed-size digests in constant time, against every key, so neither a key's length nor how
// much of it matched shows in the time an answer takes.
type Keys struct{ digests [][sha256.Size]byte }

// LoadKeys reads the keys of file (one per line; blank lines and lines starting with # are
// skipped; "" = no file) and of env's value (as KeyEnv holds them). No key at all gives empty
// Keys: the server then takes requests without authentication.
func LoadKeys(file, env string) (Keys, error) {
	var k Keys
	add := func(key, where string) error {
		if len(key) < minKeyLen {
			return fmt.Errorf("%s: an API key of %d characters is too short to be secret (%d at least)", where, len(key), minKeyLen)
		}
		k.digests = append(k.digests, sha256.Sum256([]byte(key)))
		return nil
	}
	if file != "" {
		f, err := os.Open(file)
		if err != nil {
			return Keys{}, fmt.Errorf("--api-key-file: %w", err)
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for n := 1; sc.Scan(); n++ {
			line := strings.TrimSpace(sc.Text())
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			if err := add(line, fmt.Sprintf("--api-key-file %s line %d", file, n)); err != nil {
				return Keys{}, err
			}
		}
		if err := sc.Err(); err != nil {
			return Keys{}, fmt.Errorf("--api-key-file %s: %w", file, err)
		}
		if len(k.digests) == 0 {
			return Keys{}, fmt.Errorf("--api-key-file %s holds no key", file)
		}
	}
	for _, key := range strings.FieldsFunc(env, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' }) {
		if err := add(key, KeyEnv); err != nil {
			return Keys{}, err
		}
	}
	return k, nil
}

// Len is the number of keys.
func (k Keys) Len() int { return len(k.digests) }

// allow reports whether r carries one of the keys as "Authorization: Bearer KEY". With no keys
// every request is allowed.
func (k Keys) allow(r *http.Request) bool {
	if len(k.digests) == 0 {
		return true
	}
	scheme, key, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	d := sha256.Sum256([]byte(strings.TrimSpace(key)))
	match := 0
	for _, want := range k.digests {
		match |= subtle.ConstantTimeCompare(d[:], want[:])
	}
	return match == 1
}

var errUnauthorized = &apiError{status: http.StatusUnauthorized, kind: kindAuth,
	msg: `missing or wrong API key: send "Authorization: Bearer <key>"`}

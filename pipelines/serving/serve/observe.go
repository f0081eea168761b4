package serve

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
)

// requestID is the client's X-Request-Id when it is sane (1 to 128 characters of letters,
// digits and -_.:/, what tracing headers and proxies send), else a new random one: the id goes
// into log lines and a response header, where anything else could forge or break a line.
func requestID(r *http.Request) string {
	if id := r.Header.Get("X-Request-Id"); saneID(id) {
		return id
	}
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func saneID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':' || c == '/') {
			return false
		}
	}
	return true
}

// statusWriter remembers the status written, for the access log. Unwrap lets
// http.ResponseController reach the connection (the body's read deadline).
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) status() int {
	if w.code == 0 {
		return http.StatusOK
	}
	return w.code
}

package serve

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const (
	key1 = "k1-0123456789abcdef0123"
	key2 = "k2-fedcba9876543210fedc"
)

func TestLoadKeys(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("keys", "# the team's keys\n"+key1+"\n\n  "+key2+"  \n")
	tests := []struct {
		name, file, env string
		n               int
		err             string
	}{
		{"none", "", "", 0, ""},
		{"file", good, "", 2, ""},
		{"env, commas and spaces", "", key1 + ", " + key2, 2, ""},
		{"both", good, key1, 3, ""},
		{"short key in the file", write("short", "abc\n"), "", 0, "line 1: an API key of 3 characters"},
		{"short key in the env", "", "abc", 0, KeyEnv},
		{"file without keys", write("empty", "# none yet\n"), "", 0, "holds no key"},
		{"missing file", filepath.Join(dir, "nope"), "", 0, "--api-key-file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k, err := LoadKeys(tc.file, tc.env)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || k.Len() != tc.n {
				t.Fatalf("%d keys, err %v; want %d", k.Len(), err, tc.n)
			}
		})
	}
}

// selfSigned writes a certificate for 127.0.0.1 and its key, and returns the pool that trusts it.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "reignpipe test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// Keys and TLS with a real client: over HTTPS with a generated certificate, every route but
// /healthz needs a key; a missing or wrong one is a 401 in the route's own error shape; either
// key of two works; the admin address serves /healthz and /metrics without a key, and the API
// address no longer does.
func TestKeysAndTLS(t *testing.T) {
	certFile, keyFile, pool := selfSigned(t)
	keys, err := LoadKeys("", key1+","+key2)
	if err != nil {
		t.Fatal(err)
	}
	_, srv := serveShared(t, Options{Keys: keys, Admin: true},
		Listening{TLSCert: certFile, TLSKey: keyFile, AdminAddr: "127.0.0.1:0"})
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	base := "https://" + srv.Addr
	do := func(method, path, key, ctype, body string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	s, _ := shared(t)
	oa := jsonBody(map[string]any{"model": s.Embedder.Space(), "input": "a bread oven"})
	tests := []struct {
		name, method, path, key, ctype, body string
		code                                 int
		shape                                string // "native" or "openai" for a 401
	}{
		{"search without a key", "POST", "/v1/search", "", "text/plain", "bread", 401, "native"},
		{"search with a wrong key", "POST", "/v1/search", key1 + "x", "text/plain", "bread", 401, "native"},
		{"search with a key's prefix", "POST", "/v1/search", key1[:10], "text/plain", "bread", 401, "native"},
		{"search with key 1", "POST", "/v1/search", key1, "text/plain", "bread", 200, ""},
		{"search with key 2", "POST", "/v1/search", key2, "text/plain", "bread", 200, ""},
		{"embeddings without a key", "POST", "/v1/embeddings", "", "application/json", oa, 401, "openai"},
		{"embeddings with a key", "POST", "/v1/embeddings", key2, "application/json", oa, 200, ""},
		{"info without a key", "GET", "/info", "", "", "", 401, "native"},
		{"info with a key", "GET", "/info", key1, "", "", 200, ""},
		{"health moved to the admin address", "GET", "/healthz", key1, "", "", 404, ""},
		{"metrics moved to the admin address", "GET", "/metrics", key1, "", "", 404, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, b := do(tc.method, tc.path, tc.key, tc.ctype, tc.body)
			if code != tc.code {
				t.Fatalf("%d %s, want %d", code, b, tc.code)
			}
			switch tc.shape {
			case "native":
				var e map[string]string
				if json.Unmarshal(b, &e) != nil || e["error_type"] != kindAuth || !strings.Contains(e["error"], "Bearer") {
					t.Fatalf("401 body %s", b)
				}
			case "openai":
				var e struct {
					Error struct{ Message, Type, Code string }
				}
				if json.Unmarshal(b, &e) != nil || e.Error.Code != "invalid_api_key" || e.Error.Type != "invalid_request_error" {
					t.Fatalf("401 body %s", b)
				}
			}
		})
	}
	// Plain HTTP to the TLS port is no way in.
	if resp, err := http.Get("http://" + srv.Addr + "/info"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatal("plain HTTP answered on the TLS address")
		}
	}
	for _, p := range []string{"/healthz", "/metrics"} {
		resp, err := http.Get("http://" + srv.AdminAddr + p)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || (p == "/metrics" && !strings.Contains(string(b), `reignpipe_serve_unauthorized_total{pipeline="searchtest",stage="serve"} 5`)) {
			t.Fatalf("admin %s: %d\n%s", p, resp.StatusCode, b)
		}
		if p == "/metrics" && !strings.Contains(string(b), `reignpipe_serve_request_duration_seconds_count{pipeline="searchtest",stage="serve",route="/v1/search"} 5`) {
			t.Fatalf("no per-route latency histogram:\n%s", b)
		}
	}
}

// An address other machines can reach is refused without a key, with a message that names the
// two ways out; --insecure-no-auth or a key lets it start.
func TestNonLoopbackNeedsAKey(t *testing.T) {
	s, _ := shared(t)
	_, err := Listen(Listening{Addr: "0.0.0.0:0"}, New(s, Options{}))
	if err == nil || !strings.Contains(err.Error(), "--insecure-no-auth") || !strings.Contains(err.Error(), "--api-key-file") {
		t.Fatalf("non-loopback without a key: %v", err)
	}
	keys, _ := LoadKeys("", key1)
	for _, tc := range []struct {
		o Options
		l Listening
	}{{Options{}, Listening{Addr: "0.0.0.0:0", InsecureNoAuth: true}}, {Options{Keys: keys}, Listening{Addr: "0.0.0.0:0"}}} {
		srv, err := Listen(tc.l, New(s, tc.o))
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Shutdown(time.Second); err != nil {
			t.Fatal(err)
		}
	}
}

package kafkaclient

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeCert writes a self-signed certificate and its key as PEM files in dir.
func writeCert(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "broker.test"},
		DNSNames:              []string{"broker.test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

func TestClientConfigValidate(t *testing.T) {
	dir := t.TempDir()
	cert, key := writeCert(t, dir)
	notPEM := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	unreadable := filepath.Join(dir, "unreadable.pem")
	if err := os.WriteFile(unreadable, []byte("x"), 0o000); err != nil {
		t.Fatal(err)
	}
	ok := []string{"127.0.0.1:9092"}
	cases := []struct {
		name string
		cfg  ClientConfig
		want string // substring of the error; "" for valid
	}{
		{name: "plaintext", cfg: ClientConfig{Brokers: ok}},
		{name: "several brokers", cfg: ClientConfig{Brokers: []string{"a:1", "[::1]:9092", "kafka-0.kafka.svc:9093"}}},
		{name: "no brokers", cfg: ClientConfig{}, want: "no brokers"},
		{name: "empty broker", cfg: ClientConfig{Brokers: []string{""}}, want: "broker address"},
		{name: "broker without port", cfg: ClientConfig{Brokers: []string{"localhost"}}, want: "broker address"},
		{name: "broker without host", cfg: ClientConfig{Brokers: []string{":9092"}}, want: "no host"},
		{name: "broker port not a number", cfg: ClientConfig{Brokers: []string{"h:kafka"}}, want: "port"},
		{name: "broker port out of range", cfg: ClientConfig{Brokers: []string{"h:70000"}}, want: "port"},
		{name: "tls with system roots", cfg: ClientConfig{Brokers: ok, TLS: &TLSConfig{ServerName: "broker.test"}}},
		{name: "tls with CA", cfg: ClientConfig{Brokers: ok, TLS: &TLSConfig{CAFile: cert}}},
		{name: "mutual tls", cfg: ClientConfig{Brokers: ok, TLS: &TLSConfig{CAFile: cert, CertFile: cert, KeyFile: key}}},
		{name: "missing CA file", cfg: ClientConfig{Brokers: ok, TLS: &TLSConfig{CAFile: filepath.Join(dir, "nope.pem")}}, want: "CA file"},
		{name: "CA file without PEM", cfg: ClientConfig{Brokers: ok, TLS: &TLSConfig{CAFile: notPEM}}, want: "no PEM certificate"},
		{name: "cert without key", cfg: ClientConfig{Brokers: ok, TLS: &TLSConfig{CertFile: cert}}, want: "together"},
		{name: "key without cert", cfg: ClientConfig{Brokers: ok, TLS: &TLSConfig{KeyFile: key}}, want: "together"},
		{name: "key file is not a key", cfg: ClientConfig{Brokers: ok, TLS: &TLSConfig{CertFile: cert, KeyFile: notPEM}}, want: "client certificate"},
		{name: "plain", cfg: ClientConfig{Brokers: ok, SASL: &SASLConfig{Mechanism: "PLAIN", Username: "u", Password: "p"}}},
		{name: "scram-sha-256 lower case", cfg: ClientConfig{Brokers: ok, SASL: &SASLConfig{Mechanism: "scram-sha-256", Username: "u", Password: "p"}}},
		{name: "scram-sha-512 with tls", cfg: ClientConfig{Brokers: ok, TLS: &TLSConfig{CAFile: cert}, SASL: &SASLConfig{Mechanism: "SCRAM-SHA-512", Username: "u", Password: "p"}}},
		{name: "unknown mechanism", cfg: ClientConfig{Brokers: ok, SASL: &SASLConfig{Mechanism: "GSSAPI", Username: "u"}}, want: "unknown mechanism"},
		{name: "empty mechanism", cfg: ClientConfig{Brokers: ok, SASL: &SASLConfig{Username: "u"}}, want: "unknown mechanism"},
		{name: "no username", cfg: ClientConfig{Brokers: ok, SASL: &SASLConfig{Mechanism: "PLAIN"}}, want: "username"},
	}
	if os.Geteuid() != 0 { // root reads files whatever their mode
		cases = append(cases, struct {
			name string
			cfg  ClientConfig
			want string
		}{name: "unreadable CA file", cfg: ClientConfig{Brokers: ok, TLS: &TLSConfig{CAFile: unreadable}}, want: "permission denied"})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.want != "" && err == nil:
				t.Fatalf("accepted, want an error containing %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

func TestResolvedClient(t *testing.T) {
	dir := t.TempDir()
	cert, key := writeCert(t, dir)
	rc, err := ClientConfig{
		Brokers: []string{"h:1"},
		TLS:     &TLSConfig{CAFile: cert, CertFile: cert, KeyFile: key, ServerName: "broker.test"},
		SASL:    &SASLConfig{Mechanism: "SCRAM-SHA-512", Username: "u", Password: "p"},
	}.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	if rc.clientID != "reignpipe" {
		t.Errorf("client id %q, want the default", rc.clientID)
	}
	d, tr := rc.dialer(), rc.Transport()
	if d.TLS == nil || d.TLS.RootCAs == nil || len(d.TLS.Certificates) != 1 || d.TLS.ServerName != "broker.test" {
		t.Errorf("dialer TLS not built from the files: %+v", d.TLS)
	}
	if tr.TLS != d.TLS || d.SASLMechanism == nil || tr.SASL == nil || tr.SASL.Name() != "SCRAM-SHA-512" {
		t.Error("dialer and transport disagree or lack SASL")
	}
	if d.ClientID != "reignpipe" || tr.ClientID != "reignpipe" {
		t.Error("client id not passed on")
	}
}

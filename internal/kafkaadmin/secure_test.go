package kafkaadmin

import (
	"context"
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

	"github.com/reignpipe/reignpipe/internal/kafkaclient"
	"github.com/reignpipe/reignpipe/internal/kafkatest"
)

// otherCA writes a self-signed CA certificate that signed nothing the broker has.
func otherCA(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "broker.test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// A client that must not get in (a CA that did not sign the broker's certificate, a wrong
// password, an unknown user, another server name, no TLS at all) fails to create topics at
// once, with what is wrong, against the test broker's TLS + SASL/SCRAM listener: none is
// retried as a transient failure. Producing and consuming are checked in package kafka.
func TestSecureRefusalsFailFast(t *testing.T) {
	s := kafkatest.Secure(t)
	good := kafkaclient.ClientConfig{Brokers: strings.Split(s.Brokers, ","), ClientID: "reignpipe-test",
		TLS:  &kafkaclient.TLSConfig{CAFile: s.CAFile},
		SASL: &kafkaclient.SASLConfig{Mechanism: kafkaclient.MechanismSCRAMSHA512, Username: s.User, Password: s.Password}}
	other := otherCA(t)
	cases := []struct {
		name string
		edit func(c *kafkaclient.ClientConfig)
		want string
	}{
		{"wrong CA", func(c *kafkaclient.ClientConfig) { c.TLS = &kafkaclient.TLSConfig{CAFile: other} }, "certificate signed by unknown authority"},
		{"wrong password", func(c *kafkaclient.ClientConfig) { c.SASL.Password = s.Password + "x" }, "SASL Authentication Failed"},
		{"unknown user", func(c *kafkaclient.ClientConfig) { c.SASL.Username = "nobody" }, "SASL Authentication Failed"},
		{"wrong server name", func(c *kafkaclient.ClientConfig) {
			c.TLS = &kafkaclient.TLSConfig{CAFile: s.CAFile, ServerName: "kafka.example"}
		}, "certificate is valid for localhost"},
		{"plaintext client", func(c *kafkaclient.ClientConfig) { c.TLS, c.SASL = nil, nil }, "broker appears to be expecting TLS"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := good
			sasl := *good.SASL
			cfg.SASL = &sasl
			c.edit(&cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			start := time.Now()
			err := EnsureTopics(ctx, cfg, TopicSpec{Name: kafkatest.Topic(t, "never"), Partitions: 1, ReplicationFactor: 1})
			took := time.Since(start)
			if err == nil {
				t.Fatal("EnsureTopics: got in")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("EnsureTopics: %v, want it to say %q", err, c.want)
			}
			if took > 10*time.Second {
				t.Errorf("EnsureTopics failed after %v, not at once", took)
			}
			t.Logf("EnsureTopics: %v (%v)", err, took.Round(time.Millisecond))
		})
	}
}

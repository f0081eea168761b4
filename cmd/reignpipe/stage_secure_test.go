package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reignpipe/reignpipe/internal/kafkatest"
	"github.com/reignpipe/reignpipe/internal/testenv"
	"github.com/reignpipe/reignpipe/pipelines"
)

// secureConfig is s.config's pipeline file pointed at the broker's TLS + SASL/SCRAM listener:
// the CA file and the user as given, the password read from $RP_TEST_KAFKA_PASSWORD.
func (s *stageSetup) secureConfig(t *testing.T, name, input, sinks string, sec kafkatest.SecureBroker, caFile string) string {
	t.Helper()
	path := s.config(t, name, input, "kafka", sinks)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	y := strings.Replace(string(b), fmt.Sprintf("brokers: [%q]", s.brokers), fmt.Sprintf("brokers: [%q]", sec.Brokers), 1)
	y = strings.Replace(y, "max_record_bytes: 262144}", fmt.Sprintf(
		"max_record_bytes: 262144,\n    tls: {ca_file: %q},\n    sasl: {mechanism: SCRAM-SHA-512, username: %q, password_env: RP_TEST_KAFKA_PASSWORD}}", caFile, sec.User), 1)
	if !strings.Contains(y, "password_env") || !strings.Contains(y, sec.Brokers) {
		t.Fatalf("could not point the pipeline file at the secure listener:\n%s", y)
	}
	if _, err := pipelines.Parse([]byte(y)); err != nil {
		t.Fatalf("pipeline file: %v\n%s", err, y)
	}
	if err := os.WriteFile(path, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// otherCA writes a CA certificate that signed nothing the broker has.
func otherCA(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "not the broker's CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "other-ca.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestStagesSecure: ingest and process run over the broker's TLS + SASL/SCRAM-SHA-512 listener,
// configured with transport.kafka.tls and .sasl (password from the environment), and give the
// embedded run's vectors, which kafka-python reads over the same listener. A CA that did not sign the broker's certificate, or a wrong password,
// stops a stage within seconds with a message that names the key to fix.
func TestStagesSecure(t *testing.T) {
	s := newStageSetup(t)
	sec := kafkatest.Secure(t)
	t.Setenv("RP_TEST_KAFKA_PASSWORD", sec.Password) // the stage processes inherit it
	input, ids := stageCorpus(t, s.dir, 16)
	want := embeddedVectors(t, s, input)

	cfg := s.secureConfig(t, "secure", input, "  - {type: kafka}", sec, sec.CAFile)
	start := time.Now()
	ingest := s.start(t, "ingest", "ingest", "--idle-exit", "3s", cfg)
	process := s.start(t, "process", "process", cfg)
	if err := ingest.Wait(); err != nil {
		t.Fatalf("ingest over TLS + SCRAM: %v", err)
	}
	got, _ := readVectors(t, s.brokers, s.topics+".vectors", ids, 2*time.Minute, nil)
	stop(t, "process", process)
	assertSameVectors(t, want, got)
	t.Logf("ingest + process over TLS + SCRAM-SHA-512: %d documents in %v", len(got), time.Since(start).Round(time.Millisecond))

	// kafka-python reads the vector topic over the same listener, as ops/DISTRIBUTED.md shows.
	py := testenv.Python(t, "kafka", "zstandard")
	read := exec.Command(py, "-c", `
import sys
from kafka import KafkaConsumer
b, topic, ca, user, pw = sys.argv[1:]
c = KafkaConsumer(topic, bootstrap_servers=b, security_protocol="SASL_SSL", ssl_cafile=ca,
                  sasl_mechanism="SCRAM-SHA-512", sasl_plain_username=user, sasl_plain_password=pw,
                  auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=15000)
print(len({r.key for r in c}))
`, sec.Brokers, s.topics+".vectors", sec.CAFile, sec.User, sec.Password)
	out, err := read.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != fmt.Sprint(len(ids)) {
		t.Fatalf("kafka-python over SASL_SSL read %s keys (%v), want %d", strings.TrimSpace(string(out)), err, len(ids))
	}

	cases := []struct {
		name, ca, password string
		want               []string
	}{
		{"wrong CA", otherCA(t), sec.Password, []string{
			"transport.kafka.tls: the certificate of " + sec.Brokers + " is not trusted (x509: certificate signed by unknown authority)",
			"transport.kafka.tls.ca_file must hold the CA"}},
		{"wrong password", sec.CAFile, sec.Password + "-wrong", []string{
			fmt.Sprintf("transport.kafka.sasl: %s refused user %q with SCRAM-SHA-512", sec.Brokers, sec.User),
			"invalid credentials", "$RP_TEST_KAFKA_PASSWORD"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("RP_TEST_KAFKA_PASSWORD", c.password)
			cfg := s.secureConfig(t, "refused", input, "  - {type: kafka}", sec, c.ca)
			start := time.Now()
			cmd := s.start(t, "refused-"+strings.ReplaceAll(c.name, " ", "-"), "ingest", cfg)
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if err == nil {
					t.Fatal("the stage ran")
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the stage still runs 30s later: a refused connection is being retried")
			}
			took := time.Since(start)
			out, _ := os.ReadFile(filepath.Join(s.dir, "refused-"+strings.ReplaceAll(c.name, " ", "-")+".log"))
			for _, w := range c.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("the stage's output does not say %q:\n%s", w, tail(string(out), 3000))
				}
			}
			if took > 15*time.Second {
				t.Errorf("refused after %v, want seconds", took)
			}
			t.Logf("refused in %v: %s", took.Round(time.Millisecond), lastLine(string(out)))
		})
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

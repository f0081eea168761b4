package kafkaclient

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"
)

// TLSConfig enables TLS to the brokers. Files are PEM. CAFile empty means the system roots;
// CertFile and KeyFile (both or neither) present a client certificate for mutual TLS.
type TLSConfig struct {
	CAFile     string
	CertFile   string
	KeyFile    string
	ServerName string
	// InsecureSkipVerify accepts any broker certificate: the connection is encrypted but not
	// authenticated, so it is only for test clusters with throwaway certificates.
	InsecureSkipVerify bool
}

// SASLConfig authenticates to the brokers with SASL. Mechanism is "PLAIN", "SCRAM-SHA-256" or
// "SCRAM-SHA-512" (case-insensitive). Without TLS, PLAIN sends the password in clear text.
type SASLConfig struct {
	Mechanism string
	Username  string
	Password  string
}

// Mechanism names as Kafka spells them.
const (
	MechanismPlain       = "PLAIN"
	MechanismSCRAMSHA256 = "SCRAM-SHA-256"
	MechanismSCRAMSHA512 = "SCRAM-SHA-512"
)

// build loads the PEM files; every failure names the file and what it was expected to hold,
// since a wrong path in a deployment manifest is the usual cause.
func (t *TLSConfig) build() (*tls.Config, error) {
	if t == nil {
		return nil, nil
	}
	out := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         t.ServerName,
		InsecureSkipVerify: t.InsecureSkipVerify,
	}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("kafka tls: reading CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("kafka tls: CA file %s holds no PEM certificate", t.CAFile)
		}
		out.RootCAs = pool
	}
	switch {
	case t.CertFile != "" && t.KeyFile != "":
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("kafka tls: loading client certificate %s with key %s: %w", t.CertFile, t.KeyFile, err)
		}
		out.Certificates = []tls.Certificate{cert}
	case t.CertFile != "" || t.KeyFile != "":
		return nil, errors.New("kafka tls: CertFile and KeyFile must be set together")
	}
	return out, nil
}

func (s *SASLConfig) build() (sasl.Mechanism, error) {
	if s == nil {
		return nil, nil
	}
	if s.Username == "" {
		return nil, errors.New("kafka sasl: username is empty")
	}
	switch strings.ToUpper(s.Mechanism) {
	case MechanismPlain:
		return plain.Mechanism{Username: s.Username, Password: s.Password}, nil
	case MechanismSCRAMSHA256:
		m, err := scram.Mechanism(scram.SHA256, s.Username, s.Password)
		if err != nil {
			return nil, fmt.Errorf("kafka sasl: %w", err)
		}
		return m, nil
	case MechanismSCRAMSHA512:
		m, err := scram.Mechanism(scram.SHA512, s.Username, s.Password)
		if err != nil {
			return nil, fmt.Errorf("kafka sasl: %w", err)
		}
		return m, nil
	default:
		return nil, fmt.Errorf("kafka sasl: unknown mechanism %q (want %s, %s or %s)",
			s.Mechanism, MechanismPlain, MechanismSCRAMSHA256, MechanismSCRAMSHA512)
	}
}

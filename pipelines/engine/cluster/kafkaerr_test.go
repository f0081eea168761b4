package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	kafka "github.com/segmentio/kafka-go"

	"github.com/reignpipe/reignpipe/pipelines"
)

// A failure to get into the cluster is told as the transport.kafka key to change.
func TestExplainKafka(t *testing.T) {
	k := pipelines.KafkaConfig{Brokers: []string{"b1:9093", "b2:9093"}, Topics: "wiki"}
	withTLS := k
	withTLS.TLS = &struct {
		CAFile             string `yaml:"ca_file"`
		CertFile           string `yaml:"cert_file"`
		KeyFile            string `yaml:"key_file"`
		ServerName         string `yaml:"server_name"`
		InsecureSkipVerify bool   `yaml:"insecure_skip_verify"`
	}{CAFile: "ca.pem"}
	withSASL := withTLS
	withSASL.SASL = &struct {
		Mechanism   string `yaml:"mechanism"`
		Username    string `yaml:"username"`
		Password    string `yaml:"password"`
		PasswordEnv string `yaml:"password_env"`
	}{Mechanism: "SCRAM-SHA-512", Username: "rp", PasswordEnv: "KAFKA_PASSWORD"}
	cases := []struct {
		name string
		k    pipelines.KafkaConfig
		err  error
		want string // the whole message, or its start when it ends in "..."
	}{
		{"untrusted", withTLS, fmt.Errorf("kafka.(*Client).Metadata: %w", &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}),
			"transport.kafka.tls: the certificate of b1:9093,b2:9093 is not trusted (x509: certificate signed by unknown authority): transport.kafka.tls.ca_file must hold the CA that signed the brokers' certificates (now ca.pem), and server_name, when set, a name the certificate is for"},
		{"TLS listener, no tls", k, fmt.Errorf("x: %w: broker appears to be expecting TLS", io.ErrUnexpectedEOF),
			"transport.kafka.tls: b1:9093,b2:9093 speaks TLS and the pipeline does not: add transport.kafka.tls (ca_file: the CA of the brokers' certificates)"},
		{"refused credentials", withSASL, fmt.Errorf("kafka.(*Client).Metadata: %w: invalid credentials", kafka.SASLAuthenticationFailed),
			`transport.kafka.sasl: b1:9093,b2:9093 refused user "rp" with SCRAM-SHA-512 ([58] SASL Authentication Failed: SASL Authentication failed: invalid credentials): check transport.kafka.sasl.username, .mechanism and the password in $KAFKA_PASSWORD (transport.kafka.sasl.password_env)`},
		{"no ACL", withSASL, fmt.Errorf("x: %w", kafka.TopicAuthorizationFailed),
			"transport.kafka: b1:9093,b2:9093 accepted the credentials but refused the operation ([29] Topic Authorization Failed: ...): the stages need to describe, create, read and write the pipeline's topics (wiki.*) and use its consumer groups (wiki.*); grant those ACLs"},
		{"SASL listener, no sasl", withTLS, fmt.Errorf("kafka: ensuring topics [wiki.raw]: context deadline exceeded (last error: %w)", io.ErrUnexpectedEOF),
			"kafka: ensuring topics [wiki.raw]: context deadline exceeded (last error: unexpected EOF) (the brokers keep closing the connection after the TLS handshake, as a listener that requires SASL does: is transport.kafka.sasl needed?)"},
		{"other", k, errors.New("boom"), "boom"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := explainKafka(c.k, c.err).Error()
			if pre, post, ok := strings.Cut(c.want, "..."); ok {
				if !strings.HasPrefix(got, pre) || !strings.Contains(got, post) {
					t.Fatalf("got  %s\nwant %s", got, c.want)
				}
				return
			}
			if got != c.want {
				t.Fatalf("got  %s\nwant %s", got, c.want)
			}
		})
	}
}

package cluster

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/reignpipe/reignpipe/internal/kafkaclient"
	"github.com/reignpipe/reignpipe/pipelines"
)

// explainKafka rewrites a failure to reach the cluster into what to change in the pipeline
// file. Security failures are not retried (internal/kafkaclient), so they arrive here within
// seconds of the start; the message must say which key is wrong, not which call failed.
func explainKafka(k pipelines.KafkaConfig, err error) error {
	brokers := strings.Join(k.Brokers, ",")
	kind, detail := kafkaclient.SecurityFailure(err)
	switch kind {
	case kafkaclient.SecurityTLS:
		ca := "the system's roots (no ca_file)"
		if k.TLS != nil && k.TLS.CAFile != "" {
			ca = k.TLS.CAFile
		}
		return fmt.Errorf("transport.kafka.tls: the certificate of %s is not trusted (%s): transport.kafka.tls.ca_file must hold the CA that signed the brokers' certificates (now %s), and server_name, when set, a name the certificate is for", brokers, detail, ca)
	case kafkaclient.SecurityNeedsTLS:
		return fmt.Errorf("transport.kafka.tls: %s speaks TLS and the pipeline does not: add transport.kafka.tls (ca_file: the CA of the brokers' certificates)", brokers)
	case kafkaclient.SecurityAuth:
		who, pw := "", "transport.kafka.sasl.password"
		if s := k.SASL; s != nil {
			who = fmt.Sprintf(" user %q with %s", s.Username, s.Mechanism)
			if s.PasswordEnv != "" {
				pw = "the password in $" + s.PasswordEnv + " (transport.kafka.sasl.password_env)"
			}
		}
		return fmt.Errorf("transport.kafka.sasl: %s refused%s (%s): check transport.kafka.sasl.username, .mechanism and %s", brokers, who, detail, pw)
	case kafkaclient.SecurityForbidden:
		group := strings.TrimSuffix(k.GroupFor(""), ".")
		return fmt.Errorf("transport.kafka: %s accepted the credentials but refused the operation (%s): the stages need to describe, create, read and write the pipeline's topics (%s.*) and use its consumer groups (%s.*); grant those ACLs", brokers, detail, k.Topics, group)
	}
	// A listener that requires SASL drops a client that skips it: a bare unexpected EOF on every
	// attempt. It is retried (a restarting broker does the same) and only explained here.
	if k.TLS != nil && k.SASL == nil && errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w (the brokers keep closing the connection after the TLS handshake, as a listener that requires SASL does: is transport.kafka.sasl needed?)", err)
	}
	return err
}

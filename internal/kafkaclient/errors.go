package kafkaclient

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	kafka "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
)

// Error classification: what is worth retrying (Transient), and what is a security failure
// that no retry heals (SecurityFailure for the caller's message, fatalAuth for this package's
// readers). Retrying itself is retry.go.

// ErrClosed is returned by calls on a closed Producer or Consumer.
var ErrClosed = errors.New("kafka: closed")

// Transient reports whether err is worth retrying: the broker may come back, a leader may be
// elected, a topic just created may become visible. Anything else (authorization, a record
// over the size limit, a bad configuration) fails fast because retrying cannot fix it.
func Transient(err error) bool {
	if err == nil {
		return false
	}
	var werrs kafka.WriteErrors
	if errors.As(err, &werrs) {
		seen := false
		for _, e := range werrs {
			if e == nil {
				continue
			}
			if !Transient(e) {
				return false
			}
			seen = true
		}
		return seen
	}
	var kerr kafka.Error
	if errors.As(err, &kerr) {
		return kerr.Temporary()
	}
	// Client-side metadata gaps while a broker restarts or a leader is elected: the next
	// metadata refresh fills them.
	if errors.Is(err, protocol.ErrNoLeader) || errors.Is(err, protocol.ErrNoPartition) {
		return true
	}
	if fatalTLS(err) {
		return false
	}
	var nerr net.Error
	if errors.As(err, &nerr) {
		return true
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ETIMEDOUT) ||
		errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH)
}

// fatalTLS recognises certificate failures, which look like network errors but never heal
// by retrying, and a plaintext client answered in TLS by the broker.
func fatalTLS(err error) bool {
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	var header tls.RecordHeaderError
	return errors.As(err, &unknown) || errors.As(err, &host) || errors.As(err, &invalid) ||
		errors.As(err, &header) || expectsTLS(err)
}

// expectsTLS: kafka-go saw a TLS record where a Kafka response belongs (it has no error type
// for it, only this wrapped text), so the listener speaks TLS and this client does not.
func expectsTLS(err error) bool {
	return errors.Is(err, io.ErrUnexpectedEOF) && strings.Contains(err.Error(), "broker appears to be expecting TLS")
}

// Kinds of SecurityFailure.
const (
	SecurityTLS       = "tls"        // the broker's certificate is not trusted, or not for this name
	SecurityNeedsTLS  = "needs-tls"  // the listener speaks TLS, the client does not
	SecurityAuth      = "sasl"       // the brokers refused the SASL credentials or mechanism
	SecurityForbidden = "authorized" // authenticated, but an ACL forbids the operation
)

// SecurityFailure tells what kind of security failure err is ("" for none), so that callers
// can say which setting to fix, and the broker's or the TLS stack's own words for it without
// the client library's call chain. None of them is retried.
func SecurityFailure(err error) (kind, detail string) {
	var kerr kafka.Error
	var verify *tls.CertificateVerificationError
	switch {
	case err == nil:
		return "", ""
	case expectsTLS(err):
		return SecurityNeedsTLS, "the broker answered in TLS"
	case fatalTLS(err):
		if errors.As(err, &verify) {
			return SecurityTLS, verify.Err.Error()
		}
		return SecurityTLS, err.Error()
	case errors.As(err, &kerr):
		// kafka-go writes "[code] Title: the broker's message"; keep it from the code on.
		detail = err.Error()
		if i := strings.Index(detail, fmt.Sprintf("[%d] ", int(kerr))); i >= 0 {
			detail = detail[i:]
		}
		switch kerr {
		case kafka.SASLAuthenticationFailed, kafka.UnsupportedSASLMechanism, kafka.IllegalSASLState:
			return SecurityAuth, detail
		case kafka.TopicAuthorizationFailed, kafka.GroupAuthorizationFailed, kafka.ClusterAuthorizationFailed:
			return SecurityForbidden, detail
		}
	}
	return "", ""
}

// fatalAuth recognises errors a reader cannot recover from by retrying or rejoining
// (authentication, authorisation, TLS).
func fatalAuth(err error) bool {
	var kerr kafka.Error
	if errors.As(err, &kerr) {
		switch kerr {
		case kafka.SASLAuthenticationFailed, kafka.GroupAuthorizationFailed,
			kafka.TopicAuthorizationFailed, kafka.ClusterAuthorizationFailed,
			kafka.InvalidGroupId, kafka.UnsupportedSASLMechanism, kafka.IllegalSASLState:
			return true
		}
	}
	return fatalTLS(err)
}

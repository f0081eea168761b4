package serve

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/reignpipe/reignpipe/internal/promtext"
)

// Listening says where and how the API listens.
type Listening struct {
	Addr string // the API's address
	// AdminAddr, when set, serves /healthz and /metrics there, without a key (the API must
	// have been made with Options.Admin).
	AdminAddr string
	// TLSCert and TLSKey (PEM files) serve the API over HTTPS; both or neither.
	TLSCert, TLSKey string
	// InsecureNoAuth allows an address other machines can reach without an API key.
	InsecureNoAuth bool
}

// Server is the API listening, with the owner of its background work.
type Server struct {
	Addr      string // the API's address (the port filled in when 0 was asked for)
	AdminAddr string // the admin address, or ""
	TLS       bool
	srv       *http.Server
	admin     *http.Server
	errc      chan error
	api       *API
	once      sync.Once
	err       error
}

// Listen starts serving a as l says. An address other machines can reach is refused without
// an API key unless l.InsecureNoAuth says to serve it open.
func Listen(l Listening, a *API) (*Server, error) {
	if (l.TLSCert == "") != (l.TLSKey == "") {
		return nil, errors.New("give both --tls-cert and --tls-key, or neither")
	}
	if (l.AdminAddr != "") != a.o.Admin {
		return nil, errors.New("serve: the admin address and Options.Admin must go together")
	}
	if !promtext.Loopback(l.Addr) && a.o.Keys.Len() == 0 {
		if !l.InsecureNoAuth {
			return nil, fmt.Errorf("--addr %s can be reached from other machines and no API key is set: give --api-key-file or %s, "+
				"or --insecure-no-auth to serve it without authentication", l.Addr, KeyEnv)
		}
		a.o.Logger.Warn("serving without authentication on an address other machines can reach (--insecure-no-auth)", "addr", l.Addr)
	}
	var tlsConf *tls.Config
	if l.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(l.TLSCert, l.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		tlsConf = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	} else if a.o.Keys.Len() > 0 && !promtext.Loopback(l.Addr) {
		a.o.Logger.Warn("API keys travel in clear text: serve over TLS (--tls-cert, --tls-key) or behind a TLS proxy", "addr", l.Addr)
	}
	ln, err := net.Listen("tcp", l.Addr)
	if err != nil {
		return nil, err
	}
	s := &Server{
		Addr: ln.Addr().String(), TLS: tlsConf != nil, api: a, errc: make(chan error, 2),
		srv: &http.Server{
			Handler: a, TLSConfig: tlsConf, ReadHeaderTimeout: 10 * time.Second,
			// No ReadTimeout: the body's deadline is set per request (readBody), and a
			// connection-wide one would cut a request's answer short.
			WriteTimeout: a.o.BodyTimeout + a.o.Timeout + 30*time.Second, IdleTimeout: 2 * time.Minute,
			BaseContext: func(net.Listener) context.Context { return a.stopping },
		},
	}
	if l.AdminAddr != "" {
		aln, err := net.Listen("tcp", l.AdminAddr)
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("--admin-addr: %w", err)
		}
		s.AdminAddr = aln.Addr().String()
		s.admin = &http.Server{Handler: a.AdminHandler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second}
		go func() { s.errc <- s.admin.Serve(aln) }()
	} else {
		s.errc <- http.ErrServerClosed
	}
	go func() {
		if tlsConf != nil {
			s.errc <- s.srv.ServeTLS(ln, "", "") // the certificate is in TLSConfig
			return
		}
		s.errc <- s.srv.Serve(ln)
	}()
	return s, nil
}

// stragglerWait is how long, after the grace, stopped requests get to write their 503 before
// their connections are closed.
const stragglerWait = 2 * time.Second

// Shutdown stops taking connections and lets running requests finish within grace. Those still
// running then are stopped (their context ends: tokenizing and queued windows stop, the client
// gets a 503), and Shutdown returns once every request has returned, so the caller may close
// the searcher (and the chunk cache it reads) with nothing running on it. A drain that
// had to stop requests is still a clean stop: the error is only the listener's.
// A second call returns the first one's result.
func (s *Server) Shutdown(grace time.Duration) error {
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), grace)
		defer cancel()
		if err := s.srv.Shutdown(ctx); err != nil {
			s.api.o.Logger.Warn("requests still running at the end of the grace period: stopping them", "grace", grace.String())
			s.api.stop()
			stopped := make(chan struct{})
			go func() { s.api.running.Wait(); close(stopped) }()
			select {
			case <-stopped:
			case <-time.After(stragglerWait):
			}
			// A stopped request's handler has returned, but its 503 may still be on its way
			// out of the connection: wait (briefly) for the connections to go idle before
			// closing what is left, a body still arriving or a connection gone quiet.
			fctx, fcancel := context.WithTimeout(context.Background(), stragglerWait)
			_ = s.srv.Shutdown(fctx)
			fcancel()
			_ = s.srv.Close()
			<-stopped
		}
		s.api.stop()
		if s.admin != nil {
			actx, acancel := context.WithTimeout(context.Background(), time.Second)
			_ = s.admin.Shutdown(actx)
			acancel()
			_ = s.admin.Close()
		}
		for range 2 {
			if serr := <-s.errc; !errors.Is(serr, http.ErrServerClosed) && s.err == nil {
				s.err = serr
			}
		}
	})
	return s.err
}

// Package cluster is the supervisor's link to the Redis-protocol store
// (Redis, Valkey) that several gatehouse instances behind one balancer
// share their rate-limit buckets, penalties and TLS session ticket keys
// through (the `cluster` block). It uses github.com/redis/go-redis/v9, the
// client the Redis project itself maintains: it speaks RESP2 and RESP3 to
// Redis and Valkey alike, pools and re-dials connections, pipelines, runs
// server-side scripts by digest (EVALSHA) and keeps a subscription across
// reconnects, all of which this package would otherwise write itself.
//
// Nothing here runs on the supervisor's loop, and nothing blocks it: the
// loop hands work over with methods that never wait (a full queue or a
// store that is down is refused at once, and the loop decides from its own
// state), and every answer comes back as a message passed to the post
// function the loop drains (RateResult, Penalty, State, TicketKeys). The
// package imports nothing of the supervisor's. Workers never reach the
// store: only the supervisor process holds its address and credentials.
package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/hashicorp/go-hclog"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Timings of the link. A call's own bound is far above the loop's
// store_timeout: a late answer is dropped by the loop, but a call that
// times out marks the store down, which a brief stall should not.
const (
	callTimeout   = 500 * time.Millisecond
	healthEvery   = time.Second
	minBackoff    = 100 * time.Millisecond
	maxBackoff    = 5 * time.Second
	rateWorkers   = 4
	rateQueue     = 4096
	rateBatch     = 64
	penaltyQueue  = 256
	dialTimeout   = time.Second
	connPoolSize  = 16
	connIdleConns = 2
	closeWait     = 2 * time.Second
)

// State is posted to the loop when the store becomes reachable or stops
// being so; it is posted on each change only, so the loop logs each once.
type State struct {
	Up bool
	// Err is why the store is down ("" when Up).
	Err string
}

// Store is this instance's link to the shared store. Its methods may be
// called from the loop: none waits on the network.
type Store struct {
	cfg    *config.Cluster
	log    hclog.Logger
	post   func(any)
	rdb    *redis.Client
	up     atomic.Bool
	rates  chan RateReq
	pens   chan penaltyPub
	fail   chan error
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// tickets is the ticket-key custody, nil when no secret_file is set.
	tickets *ticketCustody
}

// Start begins connecting to the store cfg names; results and state changes
// are passed to post, which must not block for long (the loop's message
// queue).
func Start(cfg *config.Cluster, log hclog.Logger, post func(any)) (*Store, error) {
	tlsConf, err := storeTLS(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Instance == "" {
		c := *cfg
		if c.Instance, _ = os.Hostname(); c.Instance == "" {
			c.Instance = "gatehouse"
		}
		cfg = &c
	}
	redis.SetLogger(quietLogger{log})
	opt := &redis.Options{
		Addr:      cfg.Address,
		DB:        cfg.DB,
		TLSConfig: tlsConf,
		// The password is read from its file at every dial, so a rotated
		// password needs no restart, and is never kept in the Config.
		CredentialsProvider: func() (string, string) {
			return cfg.User, readPassword(cfg.PasswordFile)
		},
		DialTimeout:           dialTimeout,
		ReadTimeout:           callTimeout,
		WriteTimeout:          callTimeout,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1, // a failed call falls back locally; a retry would only be later
		PoolSize:              connPoolSize,
		MinIdleConns:          connIdleConns,
		PoolTimeout:           callTimeout,
		DisableIdentity:       true,
		MaintNotificationsConfig: &maintnotifications.Config{
			Mode: maintnotifications.ModeDisabled,
		},
	}
	s := &Store{
		cfg:   cfg,
		log:   log,
		post:  post,
		rdb:   redis.NewClient(opt),
		rates: make(chan RateReq, rateQueue),
		pens:  make(chan penaltyPub, penaltyQueue),
		fail:  make(chan error, 1),
	}
	if cfg.SecretFile != "" {
		if s.tickets, err = newTicketCustody(cfg); err != nil {
			s.rdb.Close()
			return nil, err
		}
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.wg.Add(3 + rateWorkers)
	go s.monitor()
	go s.penaltyPublisher()
	go s.subscriber()
	for range rateWorkers {
		go s.rateWorker()
	}
	return s, nil
}

// Close ends the link and waits for its goroutines, at most closeWait: one
// may be blocked passing a result to a loop that is stopping and no longer
// reads its messages.
func (s *Store) Close() {
	s.cancel()
	s.rdb.Close()
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(closeWait):
	}
}

// Up reports whether the store was reachable at its last use.
func (s *Store) Up() bool { return s.up.Load() }

// Instance is this instance's name in the store.
func (s *Store) Instance() string { return s.cfg.Instance }

// Address is the store's host:port.
func (s *Store) Address() string { return s.cfg.Address }

// key is name under the configured prefix.
func (s *Store) key(name string) string { return s.cfg.KeyPrefix + name }

// failed reports a call that did not reach the store; the monitor marks it
// down and reconnects. A reply the store gave (a script error, a refused
// command) is not a failure of the link.
func (s *Store) failed(err error) {
	var re redis.Error
	if err == nil || errors.As(err, &re) || errors.Is(err, context.Canceled) {
		return
	}
	select {
	case s.fail <- err:
	default:
	}
}

// monitor connects, watches the link while it is up (a PING every
// healthEvery and every failed call) and reconnects with backoff while it
// is down, posting State on each change.
func (s *Store) monitor() {
	defer s.wg.Done()
	backoff := minBackoff
	reported := false // a down State was posted and no up since
	for {
		err := s.connect()
		if err == nil {
			s.up.Store(true)
			s.post(State{Up: true})
			reported = false
			backoff = minBackoff
			err = s.watch()
			if s.ctx.Err() != nil {
				return
			}
		}
		s.up.Store(false)
		if !reported {
			s.post(State{Err: err.Error()})
			reported = true
		}
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// connect checks the link, loads the rate script and reads the penalties
// and ticket keys already in the store.
func (s *Store) connect() error {
	ctx, cancel := context.WithTimeout(s.ctx, 2*callTimeout)
	defer cancel()
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		return err
	}
	if err := rateScript.Load(ctx, s.rdb).Err(); err != nil {
		return fmt.Errorf("loading the rate script: %w", err)
	}
	if err := s.loadPenalties(ctx); err != nil {
		return fmt.Errorf("reading penalties: %w", err)
	}
	if s.tickets != nil {
		var re redis.Error
		if err := s.tickets.tick(ctx, s); errors.As(err, &re) {
			s.log.Warn("cluster store refused a call", "error", err)
		} else if err != nil {
			return fmt.Errorf("reading the ticket keys: %w", err)
		}
	}
	for {
		select {
		case <-s.fail: // a failure from before this connection
		default:
			return nil
		}
	}
}

// watch returns why the link went down.
func (s *Store) watch() error {
	t := time.NewTicker(healthEvery)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return s.ctx.Err()
		case err := <-s.fail:
			return err
		case <-t.C:
			ctx, cancel := context.WithTimeout(s.ctx, callTimeout)
			err := s.rdb.Ping(ctx).Err()
			if err == nil && s.tickets != nil {
				err = s.tickets.tick(ctx, s)
			}
			cancel()
			var re redis.Error
			if err != nil && !errors.As(err, &re) {
				return err
			}
			if err != nil {
				s.log.Warn("cluster store refused a call", "error", err)
			}
		}
	}
}

// storeTLS is the TLS configuration to the store, nil without TLS.
func storeTLS(cfg *config.Cluster) (*tls.Config, error) {
	if !cfg.TLS {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: cfg.TLSServerName}
	if c.ServerName == "" {
		c.ServerName, _, _ = net.SplitHostPort(cfg.Address)
	}
	if cfg.TLSCAFile != "" {
		pem, err := os.ReadFile(cfg.TLSCAFile)
		if err != nil {
			return nil, fmt.Errorf("cluster.tls_ca_file: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("cluster.tls_ca_file %q holds no PEM certificate", cfg.TLSCAFile)
		}
	}
	return c, nil
}

// readPassword is the password in path ("" without one), without its
// trailing newline. An unreadable file gives "": the store then refuses
// the dial, and the refusal (never the password) is what gets logged.
func readPassword(path string) string {
	if path == "" {
		return ""
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimRight(string(b), "\r\n")
}

// quietLogger passes the client library's own messages to the log at
// debug: the link's state changes are logged once each by the loop.
type quietLogger struct{ log hclog.Logger }

func (q quietLogger) Printf(_ context.Context, format string, v ...any) {
	q.log.Debug("store client: " + fmt.Sprintf(format, v...))
}

package supervisor

import (
	"bytes"
	"context"
	"os"
	"slices"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/version"
	"github.com/gatehouse-dev/gatehouse/supervisor/admin"
	"github.com/gatehouse-dev/gatehouse/supervisor/adminapi"
)

// Admin is the supervisor as its admin socket sees it, for admin.Server's
// Serve.
func (s *Supervisor) Admin() admin.Supervisor { return adminSide{s} }

// adminSide answers the admin socket's commands.
type adminSide struct{ *Supervisor }

// View takes a Snapshot, which the admin views are made of.
func (a adminSide) View(ctx context.Context) (admin.View, error) {
	snap, err := a.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	return adminView{s: a.Supervisor, snap: snap}, nil
}

// CertificateErrors are the certificates the last reload could not load.
func (a adminSide) CertificateErrors() []string {
	var out []string
	for _, e := range a.certificateErrors() {
		out = append(out, e.Error)
	}
	return out
}

// adminView shows one Snapshot in the admin socket's types.
type adminView struct {
	s    *Supervisor
	snap Snapshot
}

func (v adminView) Workers() []adminapi.Worker      { return workersOf(v.snap) }
func (v adminView) Conns() *adminapi.Conns          { return connsOf(v.snap) }
func (v adminView) Clients(n int) []adminapi.Client { return topClients(v.snap, n) }
func (v adminView) Upstreams() []adminapi.Upstream  { return upstreamsOf(v.snap) }
func (v adminView) ShutdownGrace() time.Duration    { return v.snap.ShutdownGrace }
func (v adminView) Status() *adminapi.Status        { return v.s.status(v.snap) }

// Metrics renders the snapshot in Prometheus' text format.
func (v adminView) Metrics() (string, error) {
	var buf bytes.Buffer
	if err := v.snap.WritePrometheus(&buf); err != nil {
		return "", err
	}
	return buf.String(), nil
}

// status is the admin socket's status of snap.
func (s *Supervisor) status(snap Snapshot) *adminapi.Status {
	st := &adminapi.Status{
		Version:                 version.Version,
		PID:                     os.Getpid(),
		Started:                 s.Started(),
		UptimeSeconds:           snap.Time.Sub(s.Started()).Seconds(),
		ConfigFile:              s.ConfigPath(),
		Pool:                    snap.Pool,
		Share:                   snap.Share,
		AtWorkers:               snap.AtWorkers,
		Queued:                  snap.Queued,
		InFirstRequest:          snap.InFirstRequest,
		Waiting:                 snap.Waiting,
		HeadBytes:               snap.HeadBytes,
		Stress:                  snap.Stress,
		FirstByteTimeoutSeconds: snap.FirstByteTimeout.Seconds(),
		HeadTimeoutSeconds:      snap.HeadTimeout.Seconds(),
		BodyBytes:               snap.BodyBytes,
		BodyConns:               snap.BodyConns,
		Streams:                 snap.Streams,
		Upgrades:                snap.Upgrades,
		StreamsMax:              snap.StreamsMax,
		StreamsRefused:          snap.Counters["streams_refused"],
		UpgradesRefused:         snap.Counters["upgrades_refused"],
		Stopping:                snap.Stopping,
		Workers:                 workersOf(snap),
		Listeners:               []string{},
		WorkerDeaths:            snap.DeathsByReason(),
	}
	for _, l := range snap.Listeners {
		st.Listeners = append(st.Listeners, l.String())
	}
	for _, c := range snap.Certificates {
		st.Certificates = append(st.Certificates, adminapi.Certificate{Listener: c.Listener, Name: c.Name, DNSNames: c.DNSNames, NotAfter: c.NotAfter, Loaded: c.Loaded})
	}
	for _, e := range snap.CertificateErrors {
		st.CertificateErrors = append(st.CertificateErrors, adminapi.CertificateError{Listener: e.Listener, Name: e.Name, Error: e.Error, Kept: e.Kept, Since: e.Since})
	}
	if c := snap.Cluster; c != nil {
		st.Cluster = &adminapi.Cluster{Instance: c.Instance, Address: c.Address, Up: c.Up, Since: c.Since, Error: c.Error, SharedTickets: c.SharedTickets}
	}
	st.Privileges = s.privileges()
	return st
}

func workersOf(snap Snapshot) []adminapi.Worker {
	out := make([]adminapi.Worker, 0, len(snap.Workers))
	for _, w := range snap.Workers {
		out = append(out, adminapi.Worker{
			Slot: w.Slot, PID: w.PID, State: w.State, Sandbox: append([]string{}, w.Sandbox...),
			Active: w.Active, Kept: w.Kept, TLS: w.TLS, Served: w.Served, Restarts: w.Restarts, BackoffSeconds: w.Backoff.Seconds(), Threads: w.Threads,
		})
	}
	return out
}

func connsOf(snap Snapshot) *adminapi.Conns {
	c := &adminapi.Conns{ByState: map[string]int{}, AtWorkers: snap.AtWorkers, Waiting: snap.Waiting, Queued: snap.Queued,
		InFirstRequest: snap.InFirstRequest, Pool: snap.Pool, Share: snap.Share}
	for _, st := range stateNames {
		c.ByState[st] = 0
	}
	for st, n := range snap.Conns {
		c.ByState[st] = n
		c.Total += n
	}
	return c
}

// topClients returns the n client keys holding the most pool slots, then
// connections, then queued and past waits; refused keys come first, then
// keys present at recent worker deaths.
func topClients(snap Snapshot, n int) []adminapi.Client {
	cl := slices.Clone(snap.Clients)
	slices.SortStableFunc(cl, func(a, b ClientInfo) int {
		switch {
		case (a.Penalty > 0) != (b.Penalty > 0):
			if a.Penalty > 0 {
				return -1
			}
			return 1
		case a.Deaths != b.Deaths:
			return b.Deaths - a.Deaths
		case a.Out != b.Out:
			return b.Out - a.Out
		case a.Conns != b.Conns:
			return b.Conns - a.Conns
		case a.Waiting != b.Waiting:
			return b.Waiting - a.Waiting
		case a.Waits != b.Waits:
			if a.Waits > b.Waits {
				return -1
			}
			return 1
		}
		return 0
	})
	out := make([]adminapi.Client, 0, min(n, len(cl)))
	for _, c := range cl[:min(n, len(cl))] {
		out = append(out, adminapi.Client{Key: c.Key, Trusted: c.Trusted, Conns: c.Conns, Out: c.Out, Waiting: c.Waiting, Waits: c.Waits,
			PenaltySeconds: c.Penalty.Seconds(), Deaths: c.Deaths, BodyConns: c.BodyConns, BodyBytes: c.BodyBytes})
	}
	return out
}

func upstreamsOf(snap Snapshot) []adminapi.Upstream {
	out := make([]adminapi.Upstream, 0, len(snap.Upstreams))
	for _, u := range snap.Upstreams {
		au := adminapi.Upstream{
			Name: u.Name, MaxConnections: u.MaxConnections, Share: u.Share, Held: u.Held, Dialing: u.Dialing,
			Waiting: u.Waiting, Reclaims: u.Reclaims, ShareRefused: u.ShareRefused, Addresses: []adminapi.UpstreamAddress{},
		}
		for _, a := range u.Addresses {
			au.Addresses = append(au.Addresses, adminapi.UpstreamAddress{
				Address: a.Address, Host: a.Host, State: a.State, Fails: a.Fails, Dials: a.Dials, Failures: a.Failures,
				DownForSeconds: a.DownFor.Seconds(), LastError: a.LastError,
			})
		}
		out = append(out, au)
	}
	return out
}

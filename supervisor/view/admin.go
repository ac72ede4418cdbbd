package view

import (
	"bytes"
	"os"
	"slices"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/version"
	"github.com/gatehouse-dev/gatehouse/supervisor/adminapi"
)

// Admin shows one Snapshot in the admin socket's types (admin.View).
type Admin struct {
	Snap Snapshot
	// Started is when the supervisor started, and ConfigFile the path of
	// its configuration.
	Started    time.Time
	ConfigFile string
	// Privileges reports what the supervisor holds, asked for only when the
	// status is shown.
	Privileges func() adminapi.Privileges
}

// Workers are the worker slots.
func (v Admin) Workers() []adminapi.Worker { return workersOf(v.Snap) }

// Conns are the connections by state.
func (v Admin) Conns() *adminapi.Conns { return connsOf(v.Snap) }

// Clients are the n client keys that matter most.
func (v Admin) Clients(n int) []adminapi.Client { return topClients(v.Snap, n) }

// Upstreams are the upstreams and their addresses.
func (v Admin) Upstreams() []adminapi.Upstream { return upstreamsOf(v.Snap) }

// ShutdownGrace is what a drain gives requests in flight.
func (v Admin) ShutdownGrace() time.Duration { return v.Snap.ShutdownGrace }

// Metrics renders the snapshot in Prometheus' text format.
func (v Admin) Metrics() (string, error) {
	var buf bytes.Buffer
	if err := v.Snap.WritePrometheus(&buf); err != nil {
		return "", err
	}
	return buf.String(), nil
}

// Status is the admin socket's status of the snapshot.
func (v Admin) Status() *adminapi.Status {
	snap := v.Snap
	st := &adminapi.Status{
		Version:                 version.Version,
		PID:                     os.Getpid(),
		Started:                 v.Started,
		UptimeSeconds:           snap.Time.Sub(v.Started).Seconds(),
		ConfigFile:              v.ConfigFile,
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
		Upgrade: adminapi.Upgrade{HandingOver: snap.Upgrade.HandingOver, PeerPID: snap.Upgrade.PeerPID, PeerVersion: snap.Upgrade.PeerVersion,
			Staying: snap.Upgrade.Staying, HandedOver: snap.Upgrade.Sent, Adopted: snap.Upgrade.Received, Drained: snap.Upgrade.Drained,
			Failed: snap.Upgrade.Failed, LastError: snap.Upgrade.LastError, Starting: snap.Upgrade.Starting, OldDraining: snap.Upgrade.OldDraining},
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
	if v.Privileges != nil {
		st.Privileges = v.Privileges()
	}
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
	for _, st := range snap.ConnStates {
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

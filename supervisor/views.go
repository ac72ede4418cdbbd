package supervisor

import (
	"bytes"
	"context"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/supervisor/admin"
	"github.com/gatehouse-dev/gatehouse/supervisor/adminapi"
	"github.com/gatehouse-dev/gatehouse/supervisor/privileges"
	"github.com/gatehouse-dev/gatehouse/supervisor/view"
)

// The loop's state shown outside: to the admin socket, and to workers asking
// for stats. Both are made of a Snapshot, rendered by package view.

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
	held := func() adminapi.Privileges {
		p := privileges.Report(a.separation, a.spawner)
		p.LauncherPID = a.opts.LauncherPID
		return p
	}
	return view.Admin{Snap: snap, Started: a.Started(), ConfigFile: a.ConfigPath(), Privileges: held}, nil
}

// CertificateErrors are the certificates the last reload could not load.
func (a adminSide) CertificateErrors() []string {
	var out []string
	for _, e := range a.certificateErrors() {
		out = append(out, e.Error)
	}
	return out
}

// Stats for workers (StatsRequest, which a worker sends for a client in the
// metrics allow-list): the Prometheus text is rendered off the loop and
// served from a cache at most statsMaxAge old, so however often workers ask,
// the loop copies its state at most once per statsMaxAge and never renders.

const (
	// statsMaxAge is how old a cached rendering may be when served.
	statsMaxAge = time.Second
	// statsMax keeps a StatsReply under the frame cap.
	statsMax = 60 << 10
)

// statsRendered carries a rendering back to the loop.
type statsRendered struct {
	text []byte
	at   time.Time
}

// serveStats answers a StatsRequest that holds a slot: from the cache when it is
// fresh, else once the rendering it starts (or one under way) is done.
func (d *dispatcher) serveStats(w *workerProc, id uint64, now time.Time) {
	if d.stats.text != nil && now.Sub(d.stats.at) <= statsMaxAge {
		w.slots.Release()
		d.sendStats(w, id)
		return
	}
	d.stats.waiting = append(d.stats.waiting, statsWaiter{slot: w.slot, gen: w.gen, id: id})
	if !d.stats.rendering {
		d.stats.rendering = true
		go d.s.renderStats(d.snapshot(now))
	}
}

// statsDone takes a rendering and answers the requests waiting for it, each
// slot released before its reply is written.
func (d *dispatcher) statsDone(m statsRendered) {
	d.stats.text, d.stats.at, d.stats.rendering = m.text, m.at, false
	for _, sw := range d.stats.waiting {
		// A worker gone meanwhile took its slots with it.
		if w := d.workerFor(sw.slot, sw.gen); w != nil && w.ch != nil {
			w.slots.Release()
			d.sendStats(w, sw.id)
		}
	}
	d.stats.waiting = nil
}

func (d *dispatcher) sendStats(w *workerProc, id uint64) {
	d.send(w, &proto.Frame{Id: id, Body: &proto.Frame_StatsReply{StatsReply: &proto.StatsReply{Text: d.stats.text}}}, -1)
}

// renderStats renders snap on its own goroutine and posts the text to the
// loop.
func (s *Supervisor) renderStats(snap view.Snapshot) {
	snap.SortClients()
	var buf bytes.Buffer
	if err := snap.WritePrometheus(&buf); err != nil {
		s.log.Error("rendering metrics", "error", err)
		buf.Reset()
		buf.WriteString("# gatehouse: rendering metrics failed; see the supervisor's log\n")
	}
	s.post(statsRendered{text: view.Cut(buf.Bytes(), statsMax), at: snap.Time})
}

func (d *dispatcher) snapshot(now time.Time) view.Snapshot {
	s := view.Snapshot{
		Time:          now,
		Pool:          d.pool,
		Share:         d.share,
		AtWorkers:     d.out,
		Queued:        d.queued,
		Conns:         map[string]int{},
		ConnStates:    stateNames[:],
		Waiting:       d.lists[listWaiting].n,
		Stopping:      d.stopping,
		ShutdownGrace: d.cfg.Limits.ShutdownGrace,
		Counters: map[string]uint64{
			"accepted":           d.c.accepted,
			"closed":             d.c.closed,
			"peer_closed":        d.c.peerClosed,
			"dispatches":         d.c.dispatches,
			"requests":           d.c.requests,
			"share_waits":        d.c.shareWaits,
			"pool_waits":         d.c.poolWaits,
			"timeout_first_byte": d.c.timeoutFirstByte,
			"timeout_idle":       d.c.timeoutIdle,
			"timeout_no_worker":  d.c.timeoutNoWorker,
			"idle_evicted":       d.c.idleEvicted,
			"accept_errors":      d.c.acceptErrors,
			"accept_dispatches":  d.c.acceptDispatches,
			"closing_dispatches": d.c.closingDispatches,
			"send_batches":       d.c.sendBatches,
			"send_retries":       d.c.sendRetries,
			"accept_pauses":      d.c.acceptPauses,
			"worker_deaths":      d.c.workerDeaths,
			"worker_kills":       d.c.workerKills,
			"refused_per_client": d.c.refused[refusedPerClient],
			"refused_queued":     d.c.refused[refusedQueued],
			"ipc_overloaded":     d.c.ipcOverloaded,
			"upstream_refused":   d.c.upstreamRefused,
			"upstream_errors":    d.c.upstreamErrors,
			"rate_limited":       d.c.rateLimited,
			"tls_plain_http":     d.c.tlsPlainHTTP,
			"tls_not_tls":        d.c.tlsNotTLS,
			"tls_signs":          d.c.tlsSigns,
			"tls_handshakes":     d.c.tlsHandshakes,
			"tls_sign_errors":    d.c.tlsSignErrors,
			"tls_affinity":       d.c.tlsAffinity,
			"affinity":           d.c.affinity,
			"affinity_moves":     d.c.affinityMoves,
			// Counted by the relay goroutines, not the loop.
			"worker_log_lines_dropped": d.s.logDropped.Load(),
			"log_lines_dropped":        d.s.logOutputDropped(),
			"access_lines_rejected":    d.s.access.Rejected(),
			// A gauge, not a counter: the rate limiter's buckets now.
		},
	}
	s.RateLimitBuckets = d.limiter.Len()
	s.Certificates = d.keys.Certificates()
	s.CertificateErrors = d.keys.Failures()
	d.headSnapshot(&s)
	d.bodySnapshot(&s)
	d.streamSnapshot(&s)
	d.upgradeSnapshot(&s)
	s.Responses = map[string]uint64{"other": d.c.byClass[0]}
	for i := 1; i <= 5; i++ {
		s.Responses[strconv.Itoa(i)+"xx"] = d.c.byClass[i]
	}
	s.Latency = view.LatencyHistogram{Counts: slices.Clone(d.c.latency.counts[:len(view.LatencyBuckets)+1]), Sum: d.c.latency.sum, Count: d.c.latency.n}
	for dc, n := range d.c.deaths {
		s.Deaths = append(s.Deaths, view.DeathCount{Reason: dc.reason, Signal: signalName(dc.signal), N: n})
	}
	sort.Slice(s.Deaths, func(i, j int) bool {
		a, b := s.Deaths[i], s.Deaths[j]
		return a.Reason < b.Reason || a.Reason == b.Reason && a.Signal < b.Signal
	})
	for i, n := range d.c.outcomes {
		s.Counters["round_"+strings.ToLower(proto.Outcome(i).String())] = n
	}
	d.c.handbackCounters(s.Counters)
	for _, l := range d.listeners {
		s.Listeners = append(s.Listeners, l.addr)
	}
	for c := range d.conns.all() {
		s.Conns[c.state.String()]++
		if c.state == stateAtWorker && c.requests == 0 {
			s.InFirstRequest++
		}
	}
	s.Upstreams = d.upstreamInfo(now)
	for _, cl := range d.clients {
		s.Clients = append(s.Clients, view.ClientInfo{Key: cl.key.String(), Trusted: cl.trusted, Conns: cl.conns, Out: cl.out, Waiting: cl.waiting.n, Waits: cl.waits,
			BodyConns: cl.bodyConns, BodyBytes: cl.bodyBytes})
	}
	// Keys in the penalty box, with their connections if they hold any.
	s.Penalties = d.penalties.List(now)
	for _, p := range s.Penalties {
		i := slices.IndexFunc(s.Clients, func(c view.ClientInfo) bool { return c.Key == p.Key })
		if i < 0 {
			s.Clients = append(s.Clients, view.ClientInfo{Key: p.Key})
			i = len(s.Clients) - 1
		}
		s.Clients[i].Penalty, s.Clients[i].Deaths = p.Remaining, p.Deaths
	}
	s.Counters["client_penalties"] = d.penalties.Penalties()
	d.clusterSnapshot(&s)
	for _, w := range d.workers {
		wi := view.WorkerInfo{Slot: w.slot, PID: w.pid, State: w.state.String(), Active: w.active, Kept: w.kept, TLS: w.tls, Served: w.served, Restarts: w.restarts, Backoff: w.backoff, Threads: w.threads, Exiting: w.state == workerDead && !w.exited}
		for _, l := range w.layers {
			mark := "+"
			if !l.GetApplied() {
				mark = "-"
			}
			wi.Sandbox = append(wi.Sandbox, mark+l.GetName())
		}
		s.Workers = append(s.Workers, wi)
	}
	return s
}

func (d *dispatcher) routineCounts() eventCounts {
	return eventCounts{
		d.c.refused[refusedPerClient], d.c.refused[refusedQueued], d.incompleteEvicted, d.c.peerClosed,
		d.c.outcomes[proto.Outcome_PEER_RESET], d.c.idleEvicted,
		d.c.timeoutFirstByte, d.timeoutHead, d.timeoutGap, d.c.timeoutIdle,
		d.c.rateLimited, d.c.timeoutNoWorker,
	}
}

// summarize logs the period's events once it is summaryEvery long, or at
// once when final (shutdown), and starts the next period.
func (d *dispatcher) summarize(now time.Time, final bool) {
	if !final && now.Sub(d.summary.since) < summaryEvery {
		return
	}
	cur := d.routineCounts()
	if level, args, ok := summaryLine(d.summary.last, cur, now.Sub(d.summary.since)); ok {
		d.log.Log(level, "client events", args...)
	}
	d.summary = clientSummary{since: now, last: cur}
}

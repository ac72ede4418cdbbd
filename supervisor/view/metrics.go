package view

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/gatehouse-dev/gatehouse/internal/version"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// Metrics: a Snapshot rendered in the Prometheus text exposition format. Each
// scrape builds a fresh registry holding one collector of constant metrics, so
// the supervisor keeps no metric state of its own: the dispatcher's counters
// are the only source, copied out by Snapshot.

const metricPrefix = "gatehouse_"

// counterMetrics maps a Snapshot counter to the counter it is exported as,
// with its help text and a constant label, if any. Counters not named here
// (added later) are exported as gatehouse_<key>_total.
var counterMetrics = map[string]struct {
	name, help, label, value string
}{
	"accepted":                {"connections_accepted_total", "Connections accepted.", "", ""},
	"refused_per_client":      {"connections_refused_total", "Connections refused at admission, by reason.", "reason", "per_client"},
	"refused_queued":          {"connections_refused_total", "Connections refused at admission, by reason.", "reason", "queued"},
	"refused_penalty":         {"connections_refused_total", "Connections refused at admission, by reason.", "reason", "penalty"},
	"client_penalties":        {"client_penalties_total", "Times a client key was refused for having had connections at dying workers too often.", "", ""},
	"refused_proxy_untrusted": {"connections_refused_total", "Connections refused at admission, by reason.", "reason", "proxy_untrusted"},
	"refused_proxy_malformed": {"connections_refused_total", "Connections refused at admission, by reason.", "reason", "proxy_malformed"},
	"timeout_head":            {"timeouts_total", "Connections closed by a dispatcher timeout, by kind.", "kind", "head"},
	"timeout_head_gap":        {"timeouts_total", "Connections closed by a dispatcher timeout, by kind.", "kind", "head_gap"},
	"incomplete_evicted":      {"connections_incomplete_evicted_total", "Connections without a complete head closed to make room for a newcomer.", "", ""},
	"stress_entered":          {"stress_mode_entered_total", "Times admission entered stress mode.", "", ""},
	"bodies_buffered":         {"bodies_buffered_total", "Request bodies received outside the pool before their handler ran.", "", ""},
	"body_budget_refused":     {"body_budget_refused_total", "Request bodies refused (503) because the body budget was full.", "", ""},
	"streams_started":         {"streams_started_total", "Long-lived requests that left the pool for the stream budget, by class (stream, upgrade).", "class", "stream"},
	"upgrades_started":        {"streams_started_total", "Long-lived requests that left the pool for the stream budget, by class (stream, upgrade).", "class", "upgrade"},
	"streams_refused":         {"stream_budget_refused_total", "Long-lived requests refused (503) because the stream budget was full, by class (stream, upgrade).", "class", "stream"},
	"upgrades_refused":        {"stream_budget_refused_total", "Long-lived requests refused (503) because the stream budget was full, by class (stream, upgrade).", "class", "upgrade"},
	"body_no_slot":            {"body_no_slot_total", "Complete request bodies that found no pool slot within no_worker_timeout (503).", "", ""},
	"heads_buffered":          {"heads_buffered_total", "Request heads that arrived in parts and were held by the dispatcher until complete.", "", ""},
	"closed":                  {"connections_closed_total", "Connections closed.", "", ""},
	"peer_closed":             {"connections_peer_closed_total", "Parked connections closed by the client.", "", ""},
	"idle_evicted":            {"connections_idle_evicted_total", "Idle kept-alive connections closed to make room.", "", ""},
	"dispatches":              {"dispatches_total", "Connections handed to a worker.", "", ""},
	"requests":                {"requests_total", "Requests answered by workers.", "", ""},
	"share_waits":             {"share_waits_total", "Readable connections that waited because their client held its whole share.", "", ""},
	"pool_waits":              {"pool_waits_total", "Readable connections that waited because the pool was full.", "", ""},
	"timeout_first_byte":      {"timeouts_total", "Connections closed by a dispatcher timeout, by kind.", "kind", "first_byte"},
	"timeout_idle":            {"timeouts_total", "Connections closed by a dispatcher timeout, by kind.", "kind", "idle"},
	"timeout_no_worker":       {"timeouts_total", "Connections closed by a dispatcher timeout, by kind.", "kind", "no_worker"},
	"accept_errors":           {"accept_errors_total", "Failed accept calls.", "", ""},
	"accept_dispatches":       {"accept_dispatches_total", "Connections accepted with their head (or ClientHello) already there and dispatched in the same wake-up, never registered with the poller.", "", ""},
	"closing_dispatches":      {"closing_dispatches_total", "Connections whose head asked to close after it, dispatched with the supervisor's descriptor given up to the worker.", "", ""},
	"send_batches":            {"ipc_send_batches_total", "System calls that sent frames to a worker: each sends the frames of one wake-up to one worker (sendmmsg), or as many as its channel took.", "", ""},
	"send_retries":            {"ipc_send_retries_total", "Sends to a worker the kernel refused for now (descriptors in flight over the supervisor account's limit, or no buffer memory), kept and tried again after 10 ms.", "", ""},
	"accept_pauses":           {"accept_pauses_total", "Times accepting paused for lack of descriptors.", "", ""},
	"worker_kills":            {"worker_kills_total", "Workers killed for a protocol violation or unresponsiveness.", "", ""},
	"hot_requests":            {"hot_requests_total", "Requests that arrived while their worker kept the connection hot.", "", ""},
	"pressure_on":             {"pressure_on_total", "Times a readable connection began to wait for a slot, which ends every hot wait.", "", ""},
	"handback_buffer_empty":   {"handbacks_total", "Kept-alive connections handed back by workers, by reason.", "reason", "buffer_empty"},
	"handback_hot_window":     {"handbacks_total", "Kept-alive connections handed back by workers, by reason.", "reason", "hot_window"},
	"handback_pressure":       {"handbacks_total", "Kept-alive connections handed back by workers, by reason.", "reason", "pressure"},
	"handback_partial_head":   {"handbacks_total", "Kept-alive connections handed back by workers, by reason.", "reason", "partial_head"},
	"handback_rounds":         {"handbacks_total", "Kept-alive connections handed back by workers, by reason.", "reason", "rounds"},
	"handback_stream":         {"handbacks_total", "Kept-alive connections handed back by workers, by reason.", "reason", "stream"},
	"worker_log_lines_dropped": {"worker_log_lines_dropped_total",
		"Lines of worker output the supervisor dropped over each worker's relay rate limit.", "", ""},
	"log_lines_dropped": {"log_lines_dropped_total",
		"Lines of the supervisor's log dropped while standard error was not read fast enough.", "", ""},
	"access_lines_rejected": {"access_log_lines_rejected_total",
		"Lines a worker wrote to its access log pipe that were not access lines of its own, dropped.", "", ""},
	"tls_plain_http":  {"tls_refused_total", "Connections to a TLS listener closed before any worker saw them, by reason.", "reason", "plain_http"},
	"tls_not_tls":     {"tls_refused_total", "Connections to a TLS listener closed before any worker saw them, by reason.", "reason", "not_tls"},
	"tls_signs":       {"tls_signatures_total", "TLS handshake signatures made by the supervisor for workers.", "", ""},
	"tls_handshakes":  {"tls_handshakes_total", "New TLS connections dispatched to a worker for their handshake: each may have one signature (tls_signatures_total), none when the session resumes.", "", ""},
	"tls_sign_errors": {"tls_signature_errors_total", "TLS handshake signatures that failed.", "", ""},
	"tls_affinity":    {"tls_affinity_dispatches_total", "Kept-alive TLS connections dispatched to the worker holding their TLS state, without a descriptor.", "", ""},
	"affinity":        {"affinity_dispatches_total", "Kept-alive plain connections dispatched to the worker keeping their descriptor, without one.", "", ""},
	"affinity_moves":  {"affinity_moves_total", "Kept-alive plain connections dispatched with a descriptor to another worker, their keeper being busy, draining or gone.", "", ""},
	// worker_deaths is exported by reason and signal from Deaths, below.
	"worker_deaths": {},
}

// WritePrometheus writes s in the Prometheus text exposition format. Metric
// names start with gatehouse_.
func (s Snapshot) WritePrometheus(w io.Writer) error {
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(snapshotCollector{s}); err != nil {
		return fmt.Errorf("registering metrics: %w", err)
	}
	families, err := reg.Gather()
	if err != nil {
		return fmt.Errorf("gathering metrics: %w", err)
	}
	enc := expfmt.NewEncoder(w, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range families {
		if err := enc.Encode(mf); err != nil {
			return fmt.Errorf("encoding metrics: %w", err)
		}
	}
	return nil
}

// snapshotCollector emits constant metrics from one Snapshot.
type snapshotCollector struct{ s Snapshot }

func (c snapshotCollector) Describe(ch chan<- *prometheus.Desc) {
	prometheus.DescribeByCollect(c, ch)
}

func (c snapshotCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	descs := map[string]*prometheus.Desc{}
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		d, ok := descs[name]
		if !ok {
			d = prometheus.NewDesc(metricPrefix+name, help, labels, nil)
			descs[name] = d
		}
		return d
	}
	emit := func(d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, t, v, labels...)
	}

	emit(desc("build_info", "The running gatehouse's version.", "version"), prometheus.GaugeValue, 1, version.Version)

	// Counters, in a stable order.
	keys := make([]string, 0, len(s.Counters))
	for k := range s.Counters {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := float64(s.Counters[k])
		if m, ok := counterMetrics[k]; ok {
			switch {
			case m.name == "":
			case m.label != "":
				emit(desc(m.name, m.help, m.label), prometheus.CounterValue, v, m.value)
			default:
				emit(desc(m.name, m.help), prometheus.CounterValue, v)
			}
			continue
		}
		if outcome, ok := strings.CutPrefix(k, "round_"); ok {
			emit(desc("rounds_total", "Worker rounds, by outcome.", "outcome"), prometheus.CounterValue, v, outcome)
			continue
		}
		emit(desc(metricName(k)+"_total", "Dispatcher counter "+k+"."), prometheus.CounterValue, v)
	}

	// Worker deaths: one series per reason and signal ("none": exited).
	deaths := desc("worker_deaths_total", "Worker processes that died, by reason (seccomp, signal, exit, protocol, ping) and the signal that ended them (none: exited).", "reason", "signal")
	for _, d := range s.Deaths {
		emit(deaths, prometheus.CounterValue, float64(d.N), d.Reason, d.Signal)
	}

	// Gauges of the moment.
	emit(desc("pool_size", "Connections that may be out at workers at once."), prometheus.GaugeValue, float64(s.Pool))
	emit(desc("client_share", "Pool slots one client key may hold."), prometheus.GaugeValue, float64(s.Share))
	emit(desc("connections_at_workers", "Connections out at workers."), prometheus.GaugeValue, float64(s.AtWorkers))
	emit(desc("connections_queued", "Connections that have not finished a first request."), prometheus.GaugeValue, float64(s.Queued))
	emit(desc("connections_waiting", "Readable connections waiting for a pool slot."), prometheus.GaugeValue, float64(s.Waiting))
	holding, penalized := 0, 0
	for _, c := range s.Clients {
		if c.Conns > 0 || c.Out > 0 {
			holding++
		}
		if c.Penalty > 0 {
			penalized++
		}
	}
	emit(desc("clients", "Client keys holding a connection."), prometheus.GaugeValue, float64(holding))
	emit(desc("penalized_clients", "Client keys refused now for having had connections at dying workers too often."), prometheus.GaugeValue, float64(penalized))
	emit(desc("body_budget_bytes", "Request body bytes received, charged to the body budget (bodies received outside the pool)."), prometheus.GaugeValue, float64(s.BodyBytes))
	emit(desc("body_budget_connections", "Connections receiving a request body outside the pool."), prometheus.GaugeValue, float64(s.BodyConns))
	emit(desc("streams_open", "Long-lived requests and upgraded connections open outside the pool, by class.", "class"), prometheus.GaugeValue, float64(s.Streams), "stream")
	emit(desc("streams_open", "Long-lived requests and upgraded connections open outside the pool, by class.", "class"), prometheus.GaugeValue, float64(s.Upgrades), "upgrade")
	emit(desc("streams_max", "The stream budget: long-lived requests and upgraded connections that may be open at once."), prometheus.GaugeValue, float64(s.StreamsMax))
	emit(desc("head_buffer_bytes", "Bytes of incomplete request heads held by the dispatcher."), prometheus.GaugeValue, float64(s.HeadBytes))
	stress := 0.0
	if s.Stress {
		stress = 1
	}
	emit(desc("stress_mode", "1 while admission is in stress mode (shortened first-byte and head timeouts)."), prometheus.GaugeValue, stress)
	emit(desc("first_byte_timeout_seconds", "The first-byte timeout in force."), prometheus.GaugeValue, s.FirstByteTimeout.Seconds())
	emit(desc("head_timeout_seconds", "The request head deadline in force."), prometheus.GaugeValue, s.HeadTimeout.Seconds())
	if c := s.Cluster; c != nil {
		up := 0.0
		if c.Up {
			up = 1
		}
		emit(desc("cluster_store_up", "1 while the cluster store is reachable and rate limits and penalties are shared; 0 while each instance decides alone.", "instance"), prometheus.GaugeValue, up, c.Instance)
	}
	emit(desc("rate_limit_buckets", "Rate limit buckets held (bounded by rate_limit_entries)."), prometheus.GaugeValue, float64(s.RateLimitBuckets))
	conns := desc("connections", "Open connections, by state.", "state")
	for _, st := range s.ConnStates {
		emit(conns, prometheus.GaugeValue, float64(s.Conns[st]), st)
	}
	for st, n := range s.Conns {
		if !slices.Contains(s.ConnStates, st) {
			emit(conns, prometheus.GaugeValue, float64(n), st)
		}
	}

	// Responses and latency, as reported by workers.
	responses := desc("responses_total", "Responses, by status class.", "class")
	for class, n := range s.Responses {
		emit(responses, prometheus.CounterValue, float64(n), class)
	}
	if len(s.Latency.Counts) == len(LatencyBuckets)+1 {
		buckets := make(map[float64]uint64, len(LatencyBuckets))
		var cum uint64
		for i, le := range LatencyBuckets {
			cum += s.Latency.Counts[i]
			buckets[le] = cum
		}
		ch <- prometheus.MustNewConstHistogram(
			desc("request_duration_seconds", "Time from a request's first byte to its response's last, as reported by workers."),
			s.Latency.Count, s.Latency.Sum, buckets)
	}

	// Per worker slot.
	workers := map[string]int{}
	for _, w := range s.Workers {
		workers[w.State]++
		slot := strconv.Itoa(w.Slot)
		emit(desc("worker_in_flight", "Connections out at a worker.", "slot"), prometheus.GaugeValue, float64(w.Active), slot)
		emit(desc("worker_served_total", "Requests a worker slot answered, over all its processes.", "slot"), prometheus.CounterValue, float64(w.Served), slot)
		emit(desc("worker_restarts_total", "Times a worker slot was respawned.", "slot"), prometheus.CounterValue, float64(w.Restarts), slot)
		emit(desc("worker_backoff_seconds", "Delay before a dead worker slot is respawned.", "slot"), prometheus.GaugeValue, w.Backoff.Seconds(), slot)
	}
	for st, n := range workers {
		emit(desc("workers", "Worker slots, by state.", "state"), prometheus.GaugeValue, float64(n), st)
	}

	for _, c := range s.Certificates {
		emit(desc("tls_certificate_expiry_timestamp_seconds", "When a TLS certificate expires (its notAfter), in seconds since the epoch.", "listener", "certificate"),
			prometheus.GaugeValue, float64(c.NotAfter.Unix()), c.Listener, c.Name)
	}
	for _, e := range s.CertificateErrors {
		emit(desc("tls_certificate_load_failing_since_timestamp_seconds", "A TLS certificate the last reload could not load (the previous one is served when there was one), since when, in seconds since the epoch.", "listener", "certificate"),
			prometheus.GaugeValue, float64(e.Since.Unix()), e.Listener, e.Name)
	}

	// Per upstream and address.
	for _, u := range s.Upstreams {
		emit(desc("upstream_connections", "Upstream connections held by workers (in use or pooled), and being dialed.", "upstream", "state"), prometheus.GaugeValue, float64(u.Held), u.Name, "held")
		emit(desc("upstream_connections", "", "upstream", "state"), prometheus.GaugeValue, float64(u.Dialing), u.Name, "dialing")
		emit(desc("upstream_max_connections", "An upstream's max_connections.", "upstream"), prometheus.GaugeValue, float64(u.MaxConnections), u.Name)
		emit(desc("upstream_reclaims_total", "Requests to workers to close idle pooled connections for another worker.", "upstream"), prometheus.CounterValue, float64(u.Reclaims), u.Name)
		emit(desc("upstream_share_refused_total", "Dials refused over a worker's share of max_connections.", "upstream"), prometheus.CounterValue, float64(u.ShareRefused), u.Name)
		for _, a := range u.Addresses {
			up := 0.0
			if a.State == "up" {
				up = 1
			}
			emit(desc("upstream_address_up", "Whether an upstream address is in rotation (1) or out after failures or a failed health check (0).", "upstream", "address", "state"), prometheus.GaugeValue, up, u.Name, a.Address, a.State)
			emit(desc("upstream_address_dials_total", "Dials to an upstream address.", "upstream", "address"), prometheus.CounterValue, float64(a.Dials), u.Name, a.Address)
			emit(desc("upstream_address_failures_total", "Failed or timed-out dials to an upstream address.", "upstream", "address"), prometheus.CounterValue, float64(a.Failures), u.Name, a.Address)
		}
	}
}

// metricName makes a Snapshot counter key a valid metric name.
func metricName(key string) string {
	b := []byte(key)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b)
}

// cutNote ends a rendering cut to fit a frame.
const cutNote = "# gatehouse: metrics cut to fit one frame; gatehousectl metrics shows them all\n"

// Cut fits a Prometheus text rendering into max bytes: whole metric
// families only (each starts with its # HELP line), then a comment saying
// the rest was cut. A rendering that fits is returned as is.
func Cut(text []byte, max int) []byte {
	if len(text) <= max {
		return text
	}
	room := text[:max-len(cutNote)]
	end := bytes.LastIndex(room, []byte("\n# HELP "))
	if end < 0 {
		// One family larger than the room: whole lines of it.
		end = bytes.LastIndexByte(room, '\n')
	}
	out := append([]byte(nil), text[:end+1]...)
	return append(out, cutNote...)
}

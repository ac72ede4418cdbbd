package view

import (
	"bytes"
	"fmt"
	"math"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/version"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gatehouse-dev/gatehouse/supervisor/secrets"
)

func testSnapshot() Snapshot {
	lat := make([]uint64, len(LatencyBuckets)+1)
	lat[0], lat[3], lat[len(lat)-1] = 2, 5, 1 // ≤0.5 ms, ≤5 ms, over 30 s
	return Snapshot{
		Time: time.Now(), Pool: 32, Share: 8, AtWorkers: 3, Queued: 4, Waiting: 1,
		Conns:      map[string]int{"fresh": 4, "idle": 10, "at_worker": 3, "waiting": 1},
		ConnStates: []string{"fresh", "idle", "waiting", "at_worker", "linger", "head", "proxy"},
		Clients:    []ClientInfo{{Key: "127.0.0.1", Conns: 3, Out: 2}, {Key: "127.0.0.2", Penalty: 30 * time.Second}},
		Workers: []WorkerInfo{
			{Slot: 0, PID: 100, State: "ready", Active: 2, Served: 50, Restarts: 1, Backoff: 100 * time.Millisecond},
			{Slot: 1, PID: 101, State: "ready", Active: 1, Served: 40},
		},
		Counters: map[string]uint64{
			"accepted": 100, "refused_per_client": 2, "refused_queued": 3, "dispatches": 90,
			"share_waits": 7, "pool_waits": 6, "timeout_first_byte": 5, "timeout_idle": 4, "timeout_no_worker": 1,
			"worker_deaths": 3, "worker_kills": 1, "client_penalties": 2, "refused_penalty": 5, "round_ok": 80, "round_timeout": 2, "ipc_overloads": 9,
			"rate_store_timeouts": 4,
		},
		Listeners: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:8080")},
		Responses: map[string]uint64{"2xx": 70, "4xx": 5, "5xx": 1, "1xx": 0, "3xx": 0, "other": 0},
		Latency:   LatencyHistogram{Counts: lat, Sum: 31.5, Count: 8},
		Deaths:    []DeathCount{{Reason: "signal", Signal: "SIGKILL", N: 2}, {Reason: "exit", Signal: "none", N: 1}},
		Certificates: []secrets.CertificateInfo{{Listener: "https", Name: "site", DNSNames: []string{"example.org"},
			NotAfter: time.Unix(1_900_000_000, 0)}},
		CertificateErrors: []secrets.CertificateError{{Listener: "https", Name: "site", Kept: true, Since: time.Unix(1_800_000_000, 0)}},
		Cluster:           &ClusterInfo{Instance: "edge-1", Address: "127.0.0.1:6379"},
	}
}

func TestWritePrometheus(t *testing.T) {
	var buf bytes.Buffer
	if err := testSnapshot().WritePrometheus(&buf); err != nil {
		t.Fatal(err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatalf("output does not parse: %v\n%s", err, buf.String())
	}
	value := func(name string, labels ...string) float64 {
		t.Helper()
		mf, ok := fams[name]
		if !ok {
			t.Fatalf("no metric %s", name)
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for i := 0; i < len(labels); i += 2 {
				if !hasLabel(m, labels[i], labels[i+1]) {
					continue metrics
				}
			}
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				return m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				return m.GetGauge().GetValue()
			}
		}
		t.Fatalf("no series %s%v", name, labels)
		return 0
	}
	tests := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"gatehouse_connections_accepted_total", nil, 100},
		{"gatehouse_connections_refused_total", []string{"reason", "per_client"}, 2},
		{"gatehouse_connections_refused_total", []string{"reason", "queued"}, 3},
		{"gatehouse_connections", []string{"state", "idle"}, 10},
		{"gatehouse_connections", []string{"state", "linger"}, 0},
		{"gatehouse_dispatches_total", nil, 90},
		{"gatehouse_tls_certificate_expiry_timestamp_seconds", []string{"listener", "https", "certificate", "site"}, 1_900_000_000},
		{"gatehouse_tls_certificate_load_failing_since_timestamp_seconds", []string{"listener", "https", "certificate", "site"}, 1_800_000_000},
		{"gatehouse_share_waits_total", nil, 7},
		{"gatehouse_pool_waits_total", nil, 6},
		{"gatehouse_timeouts_total", []string{"kind", "first_byte"}, 5},
		{"gatehouse_timeouts_total", []string{"kind", "idle"}, 4},
		{"gatehouse_timeouts_total", []string{"kind", "no_worker"}, 1},
		{"gatehouse_worker_deaths_total", []string{"reason", "signal", "signal", "SIGKILL"}, 2},
		{"gatehouse_worker_deaths_total", []string{"reason", "exit", "signal", "none"}, 1},
		{"gatehouse_worker_kills_total", nil, 1},
		{"gatehouse_clients", nil, 1},
		{"gatehouse_penalized_clients", nil, 1},
		{"gatehouse_client_penalties_total", nil, 2},
		{"gatehouse_connections_refused_total", []string{"reason", "penalty"}, 5},
		{"gatehouse_worker_restarts_total", []string{"slot", "0"}, 1},
		{"gatehouse_worker_in_flight", []string{"slot", "1"}, 1},
		{"gatehouse_worker_backoff_seconds", []string{"slot", "0"}, 0.1},
		{"gatehouse_responses_total", []string{"class", "2xx"}, 70},
		{"gatehouse_rounds_total", []string{"outcome", "ok"}, 80},
		{"gatehouse_rounds_total", []string{"outcome", "timeout"}, 2},
		{"gatehouse_pool_size", nil, 32},
		{"gatehouse_workers", []string{"state", "ready"}, 2},
		{"gatehouse_ipc_overloads_total", nil, 9}, // a counter not named in metrics.go
		{"gatehouse_cluster_store_up", []string{"instance", "edge-1"}, 0},
		{"gatehouse_rate_store_timeouts_total", nil, 4},
		{"gatehouse_build_info", []string{"version", version.Version}, 1},
	}
	for _, tt := range tests {
		if got := value(tt.name, tt.labels...); got != tt.want {
			t.Errorf("%s%v = %v, want %v", tt.name, tt.labels, got, tt.want)
		}
	}
	h := fams["gatehouse_request_duration_seconds"]
	if h.GetType() != dto.MetricType_HISTOGRAM {
		t.Fatalf("latency type %v", h.GetType())
	}
	hist := h.GetMetric()[0].GetHistogram()
	if hist.GetSampleCount() != 8 || hist.GetSampleSum() != 31.5 {
		t.Errorf("latency count %d sum %v", hist.GetSampleCount(), hist.GetSampleSum())
	}
	want := map[float64]uint64{0.0005: 2, 0.001: 2, 0.005: 7, 30: 7, math.Inf(1): 8} // cumulative
	for _, b := range hist.GetBucket() {
		if w, ok := want[b.GetUpperBound()]; ok && b.GetCumulativeCount() != w {
			t.Errorf("bucket le=%v: %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), w)
		}
	}
	if len(hist.GetBucket()) != len(LatencyBuckets)+1 { // and +Inf
		t.Errorf("%d buckets, want %d", len(hist.GetBucket()), len(LatencyBuckets)+1)
	}
	for name := range fams {
		if !strings.HasPrefix(name, "gatehouse_") {
			t.Errorf("metric %s lacks the gatehouse_ prefix", name)
		}
	}
}

// An empty snapshot (no workers, no counters) still renders.
func TestWritePrometheusEmpty(t *testing.T) {
	var buf bytes.Buffer
	if err := (Snapshot{}).WritePrometheus(&buf); err != nil {
		t.Fatal(err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	if _, err := p.TextToMetricFamilies(&buf); err != nil {
		t.Fatal(err)
	}
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

// TestCut: a rendering over a frame is cut after its last whole metric
// family (or line) that fits, never inside a line, and says so.
func TestCut(t *testing.T) {
	family := func(i, samples int) string {
		var b strings.Builder
		fmt.Fprintf(&b, "# HELP gatehouse_m%d_total Help.\n# TYPE gatehouse_m%d_total counter\n", i, i)
		for j := 0; j < samples; j++ {
			fmt.Fprintf(&b, "gatehouse_m%d_total{worker=\"%d\"} %d\n", i, j, j)
		}
		return b.String()
	}
	var many, one strings.Builder
	for i := 0; i < 400; i++ {
		many.WriteString(family(i, 5))
	}
	one.WriteString(family(0, 4000))
	small := family(1, 3)

	for _, tc := range []struct {
		name        string
		text        string
		wholeFamily bool
	}{
		{"fits", small, true},
		{"many families", many.String(), true},
		{"one large family", one.String(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const max = 4096
			got := Cut([]byte(tc.text), max)
			if len(tc.text) <= max {
				if string(got) != tc.text {
					t.Fatalf("a rendering that fits was changed")
				}
				return
			}
			if len(got) > max {
				t.Fatalf("%d bytes, over %d", len(got), max)
			}
			kept, ok := bytes.CutSuffix(got, []byte(cutNote))
			if !ok {
				t.Fatalf("cut rendering does not end with %q", cutNote)
			}
			if !strings.HasPrefix(tc.text, string(kept)) || len(kept) == 0 || kept[len(kept)-1] != '\n' {
				t.Fatalf("kept part is not whole lines of the rendering")
			}
			rest := tc.text[len(kept):]
			if tc.wholeFamily && !strings.HasPrefix(rest, "# HELP ") {
				t.Fatalf("cut inside a family: the rest starts %q", rest[:min(40, len(rest))])
			}
			if len(rest) < max/4 && tc.wholeFamily {
				t.Fatalf("only %d bytes cut: the check is not exercised", len(rest))
			}
		})
	}
}

package e2e

import (
	"crypto/tls"
	"fmt"
	"slices"
	"testing"
	"time"
)

// BenchmarkClusterRateLatency measures what a rate-checked request costs
// with the cluster store on loopback against the local bucket alone: b.N
// sequential keep-alive requests to a rate-limited route (a limit never
// reached), client to response, reporting the median and the 99th
// percentile.
//
//	go test -run '^$' -bench BenchmarkClusterRateLatency -benchtime 5000x ./internal/e2e/
func BenchmarkClusterRateLatency(b *testing.B) {
	for _, mode := range []string{"local", "store"} {
		b.Run(mode, func(b *testing.B) {
			cluster := ""
			if mode == "store" {
				cluster = clusterBlock(startRedis(b), "a", "")
			}
			h := start(b, `
workers {
  count = 2
}
log {
  access_log = false
}
rate_limit "api" {
  prefix = "/api"
  rate   = 1000000
  per    = "1s"
  burst  = 1000000
}
route "/api" {
  respond {
    body = "ok\n"
  }
}
`+cluster)
			if mode == "store" {
				h.storeUp(true)
			}
			cl := newClient(b, "127.0.0.2", h.addr)
			for range 200 { // warm up
				cl.get("/api")
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				t0 := time.Now()
				resp, _, err := cl.get("/api")
				if err != nil || resp.StatusCode != 200 {
					b.Fatalf("%v %v", resp, err)
				}
				lat = append(lat, time.Since(t0))
				if resp.Close {
					cl = newClient(b, "127.0.0.2", h.addr)
				}
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			if mode == "store" {
				s := h.snapshot()
				b.ReportMetric(float64(s.Counters["rate_store_decisions"]), "store-decisions")
				b.ReportMetric(float64(s.Counters["rate_store_timeouts"]), "store-timeouts")
			}
		})
	}
}

// BenchmarkClusterHandshakes counts the full TLS handshakes (one signature
// each) of b.N connections from one client with a session cache, sent
// round-robin to two instances, each making one request: with ticket keys
// per instance every connection finds a ticket from the other instance and
// pays a full handshake; with the keys shared through the store it
// resumes. Reported per 1000 connections.
//
//	go test -run '^$' -bench BenchmarkClusterHandshakes -benchtime 1000x ./internal/e2e/
func BenchmarkClusterHandshakes(b *testing.B) {
	for _, mode := range []string{"per-instance", "shared"} {
		for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
			b.Run(fmt.Sprintf("%s/tls%x", mode, v), func(b *testing.B) {
				r := startRedis(b)
				secret := ""
				if mode == "shared" {
					secret = clusterSecret(b)
				}
				cert := writeCert(b, b.TempDir(), "default", false, "default.test")
				a := startTLSInstance(b, r, "a", cert, secret)
				c := startTLSInstance(b, r, "b", cert, secret)
				sites := []*tlsSite{a, c}
				before := counter(b, a.snapshot(), "tls_signs") + counter(b, c.snapshot(), "tls_signs")
				cfg := &tls.Config{InsecureSkipVerify: true, ServerName: "default.test", MinVersion: v, MaxVersion: v,
					ClientSessionCache: tls.NewLRUClientSessionCache(4)}
				resumed := 0
				b.ResetTimer()
				for i := range b.N {
					if get(b, sites[i%2].tlsAddr, cfg, "default.test") {
						resumed++
					}
				}
				b.StopTimer()
				after := counter(b, a.snapshot(), "tls_signs") + counter(b, c.snapshot(), "tls_signs")
				b.ReportMetric(float64(after-before)*1000/float64(b.N), "full/1000conns")
				b.ReportMetric(float64(resumed)*1000/float64(b.N), "resumed/1000conns")
			})
		}
	}
}

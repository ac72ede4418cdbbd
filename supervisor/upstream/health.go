package upstream

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/gatehouse-dev/gatehouse/config"
)

// Active health checks (an upstream's health_check block): the supervisor,
// never a worker, sends `GET path` to every address each interval. An
// address that does not answer within the timeout with a status in
// 200..399 leaves the rotation until its next success.

// HealthResult is one probe's outcome, posted to the loop.
type HealthResult struct {
	upstream string
	addr     endpoint
	err      error // nil when healthy
}

// healthCheck probes addrs until ctx ends, posting each verdict.
func healthCheck(ctx context.Context, name string, addrs []endpoint, hc config.HealthCheck, post func(any)) {
	t := time.NewTicker(hc.Interval)
	defer t.Stop()
	for {
		for _, a := range addrs {
			err := probe(ctx, a, hc)
			if ctx.Err() != nil {
				return
			}
			post(HealthResult{upstream: name, addr: a, err: err})
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// probe sends one health check request to addr. A Unix socket is asked for
// Host "localhost", as nginx's `proxy_pass http://unix:/path:` does.
func probe(ctx context.Context, addr endpoint, hc config.HealthCheck) error {
	var d net.Dialer
	client := &http.Client{
		Timeout: hc.Timeout,
		Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil,
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return d.DialContext(ctx, addr.network(), addr.address())
			}},
		// A redirect is an answer, not something to follow.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	host := addr.ap.String()
	if addr.unix != "" {
		host = "localhost"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+host+hc.Path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("User-Agent", "gatehouse-health-check")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 399 {
		return fmt.Errorf("health check answered %d", resp.StatusCode)
	}
	return nil
}

// HealthChecked records a probe's verdict for its address.
func (b *Broker) HealthChecked(r HealthResult, now time.Time) {
	u := b.upstreams[r.upstream]
	if u == nil {
		return
	}
	for _, a := range u.addrs {
		if a.addr != r.addr {
			continue
		}
		failed := r.err != nil
		if failed != a.checkFailed {
			if failed {
				b.log.Warn("upstream address failed its health check", "upstream", u.cfg.Name, "address", a.addr.String(), "error", r.err)
			} else {
				b.log.Info("upstream address passed its health check", "upstream", u.cfg.Name, "address", a.addr.String())
			}
		}
		a.checkFailed = failed
		if failed {
			a.lastError = r.err.Error()
		} else {
			// A live answer also ends a passive fail_timeout.
			a.fails, a.downUntil = 0, time.Time{}
		}
	}
	b.freed(u, now)
}

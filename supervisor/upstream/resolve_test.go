package upstream

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// A Unix socket upstream is dialed as a TCP one: the worker gets a
// connected stream socket, the supervisor keeps its copy, and the address
// shows as "unix:/path".
func TestBrokerDialsUnixSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	results := make(chan any, 1)
	b := New(hclog.NewNullLogger(), func(r any) { results <- r })
	up := config.Upstream{Name: "app", MaxConnections: 2, MaxFails: 1, FailTimeout: time.Second, ConnectTimeout: 5 * time.Second,
		Addresses: []config.Address{{Unix: path}}}
	b.Configure([]config.Upstream{up}, nil, nil, 1)
	w := &fakeWorker{}
	now := time.Unix(1000, 0)
	b.Dial(w, 1, "app", now)
	var r DialResult
	select {
	case m := <-results:
		r = m.(DialResult)
	case <-time.After(10 * time.Second):
		t.Fatal("no dial result")
	}
	if typ, err := unix.GetsockoptInt(r.fd, unix.SOL_SOCKET, unix.SO_DOMAIN); err != nil || typ != unix.AF_UNIX {
		t.Errorf("the worker's descriptor: domain %d (%v), want AF_UNIX", typ, err)
	}
	b.Dialed(r, now)
	if !w.last().GetOk() || b.HeldFDs() != 1 {
		t.Fatalf("dial: %v, %d descriptors held", w.last(), b.HeldFDs())
	}
	if got := b.Info(now)[0].Addresses[0]; got.Address != "unix:"+path || got.State != "up" || got.Dials != 1 {
		t.Errorf("Info: %+v", got)
	}
	b.Release(w, w.last().GetConn(), "app", now)
	if err := b.Check(); err != nil || b.HeldFDs() != 0 {
		t.Fatalf("after the release: %v, %d held", err, b.HeldFDs())
	}
	// A socket no one listens on fails as a refused TCP port does.
	ln.Close()
	b.Dial(w, 2, "app", now)
	b.Dialed((<-results).(DialResult), now)
	if w.last().GetOk() || !strings.Contains(w.last().GetError(), path) {
		t.Errorf("dial of a closed socket: %v", w.last())
	}
}

// "localhost" resolves from /etc/hosts, so no DNS is needed; each of its
// addresses becomes an endpoint named after it.
func TestResolveLocalhost(t *testing.T) {
	up := config.Upstream{Name: "app", Addresses: []config.Address{{Host: "localhost", Port: 9000}}}
	r, err := Resolve(context.Background(), []config.Upstream{up})
	if err != nil {
		t.Fatal(err)
	}
	aps := r["localhost:9000"]
	if !slices.Contains(aps, netip.MustParseAddrPort("127.0.0.1:9000")) {
		t.Fatalf("localhost:9000 resolved to %v, want 127.0.0.1:9000 among them", aps)
	}
	b := New(hclog.NewNullLogger(), func(any) {})
	b.Configure([]config.Upstream{up}, r, nil, 1)
	info := b.Info(time.Now())[0].Addresses
	if len(info) != len(aps) || info[0].Host != "localhost:9000" {
		t.Errorf("endpoints %+v, want one per resolved address, from localhost:9000", info)
	}
	b.Stop()
	bad := config.Upstream{Name: "bad", Addresses: []config.Address{{Host: "gatehouse-test.invalid", Port: 80}}}
	if _, err := Resolve(context.Background(), []config.Upstream{up, bad}); err == nil ||
		!strings.Contains(err.Error(), "upstream bad: resolving gatehouse-test.invalid:80") {
		t.Errorf("an unresolvable name: %v, want an error naming it", err)
	}
}

// A re-resolution that fails keeps the addresses the name had, and the
// health of those that stay; one that finds new addresses swaps them in.
func TestReresolveKeepsPreviousSet(t *testing.T) {
	lit := netip.MustParseAddrPort("192.0.2.9:80")
	up := config.Upstream{Name: "app", MaxConnections: 4, MaxFails: 1, FailTimeout: time.Minute,
		Addresses: []config.Address{{Host: "app.internal", Port: 80}, {AddrPort: lit}}}
	a1, a2, a3 := netip.MustParseAddrPort("192.0.2.1:80"), netip.MustParseAddrPort("192.0.2.2:80"), netip.MustParseAddrPort("192.0.2.3:80")
	b := New(hclog.NewNullLogger(), func(any) {})
	b.Configure([]config.Upstream{up}, Resolved{"app.internal:80": {a1, a2}}, nil, 1)
	u := b.upstreams["app"]
	now := time.Unix(1000, 0)
	addrs := func() []string {
		var out []string
		for _, a := range b.Info(now)[0].Addresses {
			out = append(out, a.Address+"="+a.State)
		}
		return out
	}
	b.addrResult(u, u.addrs[1], errors.New("refused"), now)
	want := []string{"192.0.2.1:80=up", "192.0.2.2:80=down", "192.0.2.9:80=up"}
	if got := addrs(); !slices.Equal(got, want) {
		t.Fatalf("at start: %v, want %v", got, want)
	}
	b.Reresolved(ResolveResult{upstream: "app", resolved: Resolved{}, err: errors.New("timeout")}, now)
	if got := addrs(); !slices.Equal(got, want) || !u.resolveFailing["app.internal:80"] {
		t.Errorf("after a failed re-resolution: %v, want %v kept", got, want)
	}
	b.Reresolved(ResolveResult{upstream: "app", resolved: Resolved{"app.internal:80": {a3, a2}}}, now)
	want = []string{"192.0.2.3:80=up", "192.0.2.2:80=down", "192.0.2.9:80=up"}
	if got := addrs(); !slices.Equal(got, want) || u.resolveFailing["app.internal:80"] {
		t.Errorf("after a new resolution: %v, want %v", got, want)
	}
	// A reload whose resolution failed keeps them too.
	b.Configure([]config.Upstream{up}, Resolved{}, errors.New("timeout"), 1)
	if got := addrs(); !slices.Equal(got, want) {
		t.Errorf("after a reload that did not resolve: %v, want %v", got, want)
	}
	b.Stop()
}

// The active health check reaches a Unix socket, with Host "localhost".
func TestHealthCheckUnixSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	hosts := make(chan string, 1)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hosts <- r.Host + " " + r.URL.Path
	})}
	go srv.Serve(ln)
	defer srv.Close()
	hc := config.HealthCheck{Path: "/healthz", Interval: time.Hour, Timeout: 5 * time.Second}
	if err := probe(context.Background(), endpoint{unix: path}, hc); err != nil {
		t.Fatal(err)
	}
	if got := <-hosts; got != "localhost /healthz" {
		t.Errorf("the probe asked %q, want Host localhost and its path", got)
	}
	srv.Close()
	if err := probe(context.Background(), endpoint{unix: path}, hc); err == nil {
		t.Error("a probe of a closed socket passed")
	}
}

// The re-resolution goroutine posts each interval's outcome until stopped.
func TestReresolvePosts(t *testing.T) {
	up := config.Upstream{Name: "app", ResolveInterval: 10 * time.Millisecond,
		Addresses: []config.Address{{Host: "localhost", Port: 9000}}}
	results := make(chan any, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		reresolve(ctx, up, func(r any) {
			select {
			case results <- r:
			case <-ctx.Done():
			}
		})
		close(done)
	}()
	select {
	case r := <-results:
		rr := r.(ResolveResult)
		if rr.upstream != "app" || rr.err != nil || len(rr.resolved["localhost:9000"]) == 0 {
			t.Errorf("re-resolution: %+v", rr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no re-resolution within 10s")
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the re-resolution did not stop")
	}
}

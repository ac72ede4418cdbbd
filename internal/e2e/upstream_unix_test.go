package e2e

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/sandbox"
)

// Upstreams on a Unix socket and named by host name (issue 30, item 7): the
// supervisor dials the socket or resolves the name, and the sandboxed
// worker speaks HTTP/1.1 over the descriptor it is handed, as over TCP.

// listenUnix listens on a Unix socket named name in dir.
func listenUnix(tb testing.TB, dir, name string) (net.Listener, string) {
	tb.Helper()
	path := filepath.Join(dir, name)
	l, err := net.Listen("unix", path)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.Close() })
	return l, path
}

// checkEcho sends body to path on cl and checks that it comes back whole.
func checkEcho(t *testing.T, cl *client, path string, body []byte) *http.Response {
	t.Helper()
	resp, got, err := cl.do("POST", path, "", body, false)
	if err != nil {
		t.Fatalf("POST %s of %d bytes: %v", path, len(body), err)
	}
	if resp.StatusCode != 200 || got != string(body) {
		t.Fatalf("POST %s of %d bytes: %d with %d bytes (sha %s), want 200 and the body back (sha %s)",
			path, len(body), resp.StatusCode, len(got), sum([]byte(got)), sum(body))
	}
	return resp
}

func TestProxyUnixUpstream(t *testing.T) {
	dir := workerReadableTempDir(t)
	appL, appSock := listenUnix(t, dir, "app.sock")
	serveEchoUpstream(t, appL)
	wsL, wsSock := listenUnix(t, dir, "ws.sock")
	ws := serveWSUpstream(t, wsL)
	named := startEchoUpstream(t)
	_, port, _ := net.SplitHostPort(named.addr)
	gone := filepath.Join(dir, "gone.sock")
	h := start(t, fmt.Sprintf(`
workers {
  count = 2
}
upstream "app" {
  addresses = ["unix:%s"]
}
upstream "ws" {
  addresses = ["unix:%s"]
}
upstream "named" {
  addresses = ["localhost:%s"]
}
upstream "gone" {
  addresses = ["unix:%s"]
}
route "/app/" {
  proxy {
    upstream = "app"
  }
}
route "/ws" {
  proxy {
    upstream = "ws"
    upgrade  = ["websocket"]
  }
}
route "/named/" {
  proxy {
    upstream = "named"
  }
}
route "/gone/" {
  proxy {
    upstream = "gone"
  }
}
`, appSock, wsSock, port, gone))

	cl := newClient(t, "127.0.0.1", h.addr)
	small := []byte("hello, world\n")
	big := make([]byte, 1<<20)
	rand.Read(big)
	resp := checkEcho(t, cl, "/app/small?q=1", small)
	if got := resp.Header.Get("X-Echo-Host"); got != "test.example" {
		t.Errorf("Host at the Unix socket upstream: %q, want the client's", got)
	}
	if got := resp.Header.Get("X-Echo-Path"); got != "/app/small?q=1" {
		t.Errorf("path at the upstream: %q", got)
	}
	checkEcho(t, cl, "/app/big", big)
	checkEcho(t, cl, "/named/small", small)
	checkEcho(t, cl, "/named/big", big)

	// A WebSocket over the Unix socket, relayed both ways.
	wc, status := wsDial(t, "127.0.0.1", h.addr, "/ws")
	if status != http.StatusSwitchingProtocols {
		t.Fatalf("WebSocket upgrade: %d", status)
	}
	if err := wc.exchange(wsText, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	if err := wc.exchange(wsBinary, big[:64<<10]); err != nil {
		t.Fatal(err)
	}
	if ws.upgrades.Load() != 1 {
		t.Errorf("upgrades at the upstream: %d, want 1", ws.upgrades.Load())
	}

	// A socket no one listens on: 502 twice, and the address shows
	// failing, not up.
	for i := 0; i < 2; i++ {
		resp, _, err := cl.do("GET", "/gone/x", "", nil, false)
		if err != nil || resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("GET of the absent socket: %v %v, want 502", resp, err)
		}
	}

	s := h.snapshot()
	app := upstreamOf(t, s, "app").Addresses
	if len(app) != 1 || app[0].Address != "unix:"+appSock || app[0].State != "up" || app[0].Dials == 0 || app[0].Host != "" {
		t.Errorf("upstream app: %+v, want one address unix:%s, up and dialed", app, appSock)
	}
	g := addressOf(t, upstreamOf(t, s, "gone"), "unix:"+gone)
	if g.State != "failing" || g.Failures != 2 || g.Fails != 2 || !strings.Contains(g.LastError, gone) {
		t.Errorf("the absent socket after 2 failed dials: %+v, want failing with its error", g)
	}
	n := addressOf(t, upstreamOf(t, s, "named"), named.addr)
	if n.Host != "localhost:"+port || n.Dials == 0 {
		t.Errorf("localhost:%s: %+v, want %s from it, dialed", port, n, named.addr)
	}
	t.Logf("named: %+v", upstreamOf(t, s, "named").Addresses)
	var metrics bytes.Buffer
	s.WritePrometheus(&metrics)
	for _, want := range []string{
		fmt.Sprintf(`gatehouse_upstream_address_dials_total{address="unix:%s",upstream="app"}`, appSock),
		fmt.Sprintf(`gatehouse_upstream_address_up{address="unix:%s",state="failing",upstream="gone"} 0`, gone),
	} {
		if !strings.Contains(metrics.String(), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// A host name that does not resolve fails the start, naming it.
func TestProxyUpstreamNameUnresolvable(t *testing.T) {
	dir := workerReadableTempDir(t)
	writeOpsFile(t, dir, "127.0.0.1:0", "one\n", `
upstream "app" {
  addresses = ["gatehouse-test.invalid:80"]
}
`)
	p := startOps(t, dir, opsOptions{args: []string{"-config", "gatehouse.hcl"}, noWait: true})
	if code := p.waitExit(t, 30*time.Second); code == 0 {
		t.Fatalf("gatehouse started with an unresolvable upstream")
	}
	if log := p.log(); !strings.Contains(log, "upstream app: resolving gatehouse-test.invalid:80") {
		t.Errorf("the log does not name the name:\n%s", log)
	}
}

// The binary as root: the supervisor drops to its own account, which must
// be allowed to connect to the socket, as nginx's workers must. Until it
// is, the dial's error shows in gatehousectl upstreams.
func TestProxyUnixUpstreamDroppedSupervisor(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the supervisor drops to its account only when started as root")
	}
	sockDir := workerReadableTempDir(t)
	l, path := listenUnix(t, sockDir, "app.sock")
	serveEchoUpstream(t, l)
	if err := os.Chmod(path, 0o700); err != nil {
		t.Fatal(err)
	}
	p, sock, _ := startAdmin(t, fmt.Sprintf(`
upstream "app" {
  addresses = ["unix:%s"]
}
route "/app/" {
  proxy {
    upstream = "app"
  }
}
`, path))
	cl := newClient(t, "127.0.0.1", p.addr)
	resp, _, err := cl.do("GET", "/app/x", "", nil, false)
	if err != nil || resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("a socket the supervisor's account may not use: %v %v, want 502", resp, err)
	}
	r := ctl(t, nil, ctlBin(t), "-socket", sock, "upstreams")
	t.Logf("gatehousectl upstreams:\n%s", r.stdout)
	if !strings.Contains(r.stdout, "unix:"+path) || !strings.Contains(r.stdout, "permission denied") || !strings.Contains(r.stdout, "failing") {
		t.Errorf("gatehousectl upstreams does not show the socket failing with permission denied")
	}
	// As for gunicorn's --umask or a shared group: the account may write.
	sup, _, err := sandbox.SupervisorAccount("")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(path, sup.UID, sup.GID); err != nil {
		t.Fatal(err)
	}
	body := []byte("hello, world\n")
	checkEcho(t, cl, "/app/x", body)
	big := make([]byte, 1<<20)
	rand.Read(big)
	checkEcho(t, cl, "/app/big", big)
	if a := ctlJSON(t, sock, "upstreams").Upstreams[0].Addresses[0]; a.State != "up" {
		t.Errorf("after a dial that worked: %+v, want up", a)
	}
}

// Side by side with nginx's `proxy_pass http://unix:/path:` in front of the
// same app: the same statuses and bodies; nginx sends Host "localhost" (its
// $proxy_host), gatehouse the client's.
func TestProxyUnixUpstreamNginx(t *testing.T) {
	dir := workerReadableTempDir(t)
	l, path := listenUnix(t, dir, "app.sock")
	serveEchoUpstream(t, l)
	ngx := startNginxServer(t, fmt.Sprintf(`
    client_max_body_size 2m;
    location /app/ {
      proxy_pass http://unix:%s:;
      proxy_http_version 1.1;
    }`, path))
	h := start(t, fmt.Sprintf(`
upstream "app" {
  addresses = ["unix:%s"]
}
route "/app/" {
  proxy {
    upstream = "app"
  }
}
`, path))
	big := make([]byte, 1<<20)
	rand.Read(big)
	for _, body := range [][]byte{[]byte("hello, world\n"), big} {
		var hosts []string
		for _, addr := range []string{ngx, h.addr} {
			resp := checkEcho(t, newClient(t, "127.0.0.1", addr), "/app/x?y=1", body)
			if got := resp.Header.Get("X-Echo-Path"); got != "/app/x?y=1" {
				t.Errorf("%s: path at the upstream %q", addr, got)
			}
			hosts = append(hosts, resp.Header.Get("X-Echo-Host"))
		}
		if hosts[0] != "localhost" || hosts[1] != "test.example" {
			t.Errorf("Host at the upstream: nginx %q, gatehouse %q", hosts[0], hosts[1])
		}
	}
}

// A reload resolves the upstream's host name again, in the reload's
// goroutine: only the new port is dialed, the address keeps its name.
func TestProxyUpstreamNameReload(t *testing.T) {
	one, two := startEchoUpstream(t), startEchoUpstream(t)
	_, p1, _ := net.SplitHostPort(one.addr)
	_, p2, _ := net.SplitHostPort(two.addr)
	h := start(t, fmt.Sprintf(`
log {
  access_log = false
}
upstream "app" {
  addresses        = ["localhost:%s"]
  resolve_interval = "0s"
}
route "/app/" {
  proxy {
    upstream = "app"
  }
}
`, p1))
	checkEcho(t, newClient(t, "127.0.0.1", h.addr), "/app/x", []byte("hello, world\n"))
	src, err := os.ReadFile(h.config)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(h.config, []byte(strings.Replace(string(src), "localhost:"+p1, "localhost:"+p2, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := h.sup.Reload(t.Context()); err != nil {
		t.Fatal(err)
	}
	// A worker of the old configuration may still answer over a
	// connection it pooled to the old port until it is replaced; the
	// supervisor dials only the new one.
	for i := 0; two.conns.Load() == 0; i++ {
		if i == 100 {
			t.Fatalf("no connection to the new port after %d requests", i)
		}
		checkEcho(t, newClient(t, "127.0.0.1", h.addr), "/app/y", []byte("hello, world\n"))
		time.Sleep(20 * time.Millisecond)
	}
	if one.conns.Load() != 1 {
		t.Errorf("connections to the old port: %d, want the 1 of before the reload", one.conns.Load())
	}
	a := addressOf(t, upstreamOf(t, h.snapshot(), "app"), two.addr)
	if a.Host != "localhost:"+p2 || a.State != "up" {
		t.Errorf("after the reload: %+v", a)
	}
}

package e2e

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/supervisor"
)

// tlsKeepAlive is a client's kept-alive TLS connection to a tlsSite.
type tlsKeepAlive struct {
	*tls.Conn
	br *bufio.Reader
}

func dialKeepAlive(t *testing.T, s *tlsSite, src, name string) *tlsKeepAlive {
	t.Helper()
	c := tls.Client(dialFrom(t, src, s.tlsAddr), &tls.Config{ServerName: name, InsecureSkipVerify: true})
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	return &tlsKeepAlive{Conn: c, br: bufio.NewReader(c)}
}

// get sends one kept-alive request for /ok and reads its answer.
func (c *tlsKeepAlive) get() error {
	fmt.Fprint(c, "GET /ok HTTP/1.1\r\nHost: default.test\r\n\r\n")
	resp, body, err := readResponse(c.br, "GET")
	switch {
	case err != nil:
		return err
	case resp.StatusCode != 200 || body != "ok\n" || resp.Close:
		return fmt.Errorf("%d %q close=%v", resp.StatusCode, body, resp.Close)
	}
	return nil
}

// Over workers.tls_max_idle_sessions the worker closes its oldest idle TLS
// connection with close_notify; the supervisor sees it close and forgets it,
// and the newer ones keep working.
func TestTLSIdleSessionCap(t *testing.T) {
	s := startTLSWith(t, "  tls_max_idle_sessions = 2\n", "")
	// With both workers idle the dispatcher picks the first: every
	// connection below is kept by worker 0.
	s.waitFor("both workers ready", 20*time.Second, func(snap supervisor.Snapshot) bool {
		return len(snap.Workers) == 2 && snap.Workers[0].State == "ready" && snap.Workers[1].State == "ready"
	})
	var conns []*tlsKeepAlive
	for i, src := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"} {
		c := dialKeepAlive(t, s, src, "default.test")
		if err := c.get(); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, c)
		want := min(i+1, 2)
		s.waitFor(fmt.Sprintf("%d parked", want), 10*time.Second, func(snap supervisor.Snapshot) bool {
			return snap.AtWorkers == 0 && snap.Conns["idle"] == want
		})
	}
	// The oldest got close_notify: a clean end of the TLS stream.
	conns[0].SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := conns[0].Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("the oldest idle connection over the cap: %d bytes, %v; want close_notify (EOF)", n, err)
	}
	for i, c := range conns[1:] {
		if err := c.get(); err != nil {
			t.Errorf("connection %d under the cap: %v", i+1, err)
		}
	}
}

// workerStates maps each worker's pid to its state.
func workerStates(snap supervisor.Snapshot) map[int]string {
	m := map[int]string{}
	for _, w := range snap.Workers {
		m[w.PID] = w.State
	}
	return m
}

// A reload that replaces the workers drops no TLS connection: the old
// worker holding a kept-alive connection's TLS state keeps serving it
// (draining, taking no new connection) until the client closes it, and
// only then exits; new connections go to the new workers.
func TestTLSReloadKeepsKeptConnections(t *testing.T) {
	s := startTLS(t, "")
	s.waitFor("both workers ready", 20*time.Second, func(snap supervisor.Snapshot) bool {
		return len(snap.Workers) == 2 && snap.Workers[0].State == "ready" && snap.Workers[1].State == "ready"
	})
	old := workerStates(s.snapshot())
	a := dialKeepAlive(t, s, "127.0.0.2", "default.test")
	if err := a.get(); err != nil {
		t.Fatal(err)
	}
	s.waitFor("A parked", 10*time.Second, func(snap supervisor.Snapshot) bool {
		return snap.AtWorkers == 0 && snap.Conns["idle"] == 1
	})
	// A new route: what workers are started with changed, so every worker
	// is replaced.
	src, err := os.ReadFile(s.config)
	if err != nil {
		t.Fatal(err)
	}
	src = append(src, "route \"/new\" {\n  respond {\n    body = \"new\\n\"\n  }\n}\n"...)
	if err := os.WriteFile(s.config, src, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.sup.Reload(t.Context()); err != nil {
		t.Fatal(err)
	}
	replaced := func(draining int) func(supervisor.Snapshot) bool {
		return func(snap supervisor.Snapshot) bool {
			ready, drain := 0, 0
			for pid, st := range workerStates(snap) {
				_, wasOld := old[pid]
				switch {
				case !wasOld && st == "ready":
					ready++
				case wasOld && st == "draining":
					drain++
				default:
					return false
				}
			}
			return ready == 2 && drain == draining
		}
	}
	// One old worker keeps A and drains; the other has left.
	s.waitFor("two new workers, the old one keeping A draining", 30*time.Second, replaced(1))
	for i := 0; i < 3; i++ {
		if err := a.get(); err != nil {
			t.Fatalf("request %d on the TLS connection opened before the reload: %v", i+2, err)
		}
		s.waitFor("A parked again", 10*time.Second, func(snap supervisor.Snapshot) bool {
			return snap.AtWorkers == 0 && snap.Conns["idle"] == 1
		})
	}
	out, err := s.curl(t, "default.test", s.def, "/new")
	if err != nil || out != "new\n" {
		t.Errorf("a new connection after the reload: %v %q", err, out)
	}
	if snap := s.snapshot(); !replaced(1)(snap) {
		t.Errorf("the old worker left while it kept A: %+v", snap.Workers)
	}
	// A closed: its worker keeps nothing and exits, which is no death.
	a.Close()
	s.waitFor("the old worker gone", 30*time.Second, replaced(0))
	if deaths := s.snapshot().Counters["worker_deaths"]; deaths != 0 {
		t.Errorf("%d worker deaths", deaths)
	}
}

package e2e

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
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

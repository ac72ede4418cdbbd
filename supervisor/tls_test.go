package supervisor

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/gatehouse-dev/gatehouse/internal/testcert"
	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/supervisor/secrets"
	"github.com/gatehouse-dev/gatehouse/supervisor/view"
)

// oneCertificate is the ring of a TLS listener "https" with one
// certificate, ec.test's.
func oneCertificate(t *testing.T) *secrets.Ring {
	t.Helper()
	dir := t.TempDir()
	testcert.WritePair(t, dir, "ec.test", false)
	src := fmt.Sprintf("listener \"https\" {\n  address = \"127.0.0.1:0\"\n  tls {\n    certificate \"ec\" {\n      cert = %q\n      key  = %q\n    }\n  }\n}\n"+
		"route \"/\" {\n  respond {\n    body = \"x\"\n  }\n}\n", filepath.Join(dir, "ec.test.pem"), filepath.Join(dir, "ec.test.key"))
	cfg, err := config.Parse([]byte(src), "tls.hcl", config.ParseOptions{BaseDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	k, err := secrets.Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// Session ticket keys rotate hourly; the previous key is kept. The loop
// rotates them at ticketDeadline.
func TestTicketKeysRotate(t *testing.T) {
	d := &dispatcher{}
	d.keys = oneCertificate(t)
	start := time.Unix(1_000_000, 0)
	d.rotateTickets(start)
	if len(d.tickets.keys) != 1 || len(d.tickets.keys[0]) != 32 {
		t.Fatalf("at start: keys %x", d.tickets.keys)
	}
	if got := d.ticketDeadline(); !got.Equal(start.Add(time.Hour)) {
		t.Errorf("next rotation at %v, want an hour after the start", got)
	}
	first := d.tickets.keys[0]
	d.rotateTickets(start.Add(time.Hour))
	second := d.tickets.keys
	if len(second) != 2 || string(second[1]) != string(first) || string(second[0]) == string(first) {
		t.Errorf("after an hour: keys %x, before %x", second, first)
	}
	d.rotateTickets(start.Add(2 * time.Hour))
	if third := d.tickets.keys; len(third) != 2 || string(third[1]) != string(second[0]) || string(third[0]) == string(second[0]) {
		t.Errorf("after two hours: keys %x, before %x", third, second)
	}
	// Without a TLS listener there are none.
	plain := &dispatcher{}
	plain.rotateTickets(start)
	if len(plain.tickets.keys) != 0 || !plain.ticketDeadline().IsZero() {
		t.Errorf("without TLS: keys %x", plain.tickets.keys)
	}
}

// A new TLS connection goes to a worker that can hold its state under
// workers.tls_max_idle_sessions, before one with more free slots that
// cannot: that one would close its oldest idle TLS connection to keep it.
// The per-worker count of TLS states held rises at the dispatch and falls
// when the supervisor closes a kept connection or a worker returns one
// closed.
func TestNewTLSConnectionToWorkerWithRoom(t *testing.T) {
	dir := t.TempDir()
	testcert.WritePair(t, dir, "ec.test", false)
	src := baseConfig(2, 4, fmt.Sprintf(`
listener "https" {
  address = "127.0.0.1:0"
  tls {
    certificate "ec" {
      cert = %q
      key  = %q
    }
  }
}
`, filepath.Join(dir, "ec.test.pem"), filepath.Join(dir, "ec.test.key")))
	h := startLoop(t, strings.Replace(src, "}\nroute", "  tls_max_idle_sessions = 1\n}\nroute", 1))
	addr := h.s.Addrs()[1]
	// A complete handshake record is all the dispatcher waits for.
	hello := []byte{0x16, 3, 1, 0, 4, 1, 0, 0, 0}
	dialTLS := func(from string) *net.TCPConn {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: frameWait}
		c, err := d.Dial("tcp", addr.String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := c.Write(hello); err != nil {
			t.Fatal(err)
		}
		return c.(*net.TCPConn)
	}
	w0, w1 := h.workers[0], h.workers[1]
	at := func(want *fakeProc, what string) uint64 {
		t.Helper()
		p, id, _ := h.keeping(h.workers)
		if p != want {
			t.Fatalf("%s at worker %d, want %d", what, p.slot, want.slot)
		}
		return id
	}

	// Both workers free: a tie goes to the first.
	a := dialTLS("127.0.0.2")
	idA := at(w0, "the first TLS connection")
	if err := w0.Done(keptDone(idA, 1)); err != nil {
		t.Fatal(err)
	}
	h.waitFor("worker 0 keeping one TLS connection", func(s view.Snapshot) bool {
		return s.Workers[0].TLS == 1 && s.AtWorkers == 0
	})
	// Worker 0 ends with more free slots than worker 1.
	b := h.dial("127.0.0.3")
	h.send(b)
	idB := at(w0, "the first plain connection")
	c := h.dial("127.0.0.4")
	h.send(c)
	at(w1, "the second plain connection")
	if err := w0.Done(done(idB, 1, proto.Disposition_CLOSE)); err != nil {
		t.Fatal(err)
	}
	h.waitFor("worker 0 free", func(s view.Snapshot) bool { return s.Workers[0].Active == 0 && s.Workers[1].Active == 1 })

	dialTLS("127.0.0.5")
	idD := at(w1, "the TLS connection over worker 0's cap")
	if s := h.snapshot(); s.Workers[0].TLS != 1 || s.Workers[1].TLS != 1 {
		t.Fatalf("TLS states held %d and %d, want 1 and 1", s.Workers[0].TLS, s.Workers[1].TLS)
	}
	if err := w1.Done(done(idD, 1, proto.Disposition_CLOSE)); err != nil {
		t.Fatal(err)
	}
	a.Close()
	h.forgotten(w0, idA)
	h.waitFor("no TLS state held", func(s view.Snapshot) bool { return s.Workers[0].TLS == 0 && s.Workers[1].TLS == 0 })
}

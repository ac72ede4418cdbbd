package e2e

import (
	"bufio"
	"io"
	"net"
	"os/exec"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/supervisor/view"
)

// A TLS record that carries no plaintext (here a TLS 1.3 KeyUpdate, sent by
// openssl s_client's "k" command) is a complete record, so the dispatcher
// sends the connection to its worker; crypto/tls then reads on for the next
// record. The worker must not wait for it: the connection comes back at
// once, still usable, and the next request on it is answered.
func TestTLSRecordWithoutPlaintextHoldsNoWorker(t *testing.T) {
	s := startTLSWith(t, "  count = 1\n  concurrency = 1\n", "")
	_, port, _ := net.SplitHostPort(s.tlsAddr)
	cmd := exec.Command("openssl", "s_client", "-connect", "127.0.0.1:"+port, "-servername", "default.test", "-tls1_3")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	lines := make(chan string, 256)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	answered := func(what string) {
		t.Helper()
		timeout := time.After(20 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("%s: openssl s_client ended without the answer", what)
				}
				if l == "ok" {
					return
				}
			case <-timeout:
				t.Fatalf("%s: no answer", what)
			}
		}
	}
	parked := func(snap view.Snapshot) bool { return snap.AtWorkers == 0 && snap.Conns["idle"] == 1 }
	// s_client sends each read of its input as it is, and takes one that
	// starts with "k" as its KeyUpdate command.
	const get = "GET /ok HTTP/1.1\r\nHost: default.test\r\n\r\n"
	io.WriteString(stdin, get)
	answered("the first request")
	before := counter(t, s.waitFor("the connection parked", 10*time.Second, parked), "dispatches")

	io.WriteString(stdin, "k\n")
	snap := s.waitFor("the KeyUpdate dispatched and handed back", 20*time.Second, func(snap view.Snapshot) bool {
		return parked(snap) && counter(t, snap, "dispatches") > before
	})
	if n := counter(t, snap, "round_timeout"); n != 0 {
		t.Errorf("%d rounds timed out: the worker waited for the client", n)
	}
	io.WriteString(stdin, get)
	answered("the request after the KeyUpdate")
}

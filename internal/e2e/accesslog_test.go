package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// accessFields is the JSON access line's field order.
var accessFields = []string{"time", "worker", "client", "method", "path", "proto", "status", "bytes", "duration_us", "referer", "user_agent"}

// Rotating the access log as logrotate does (rename, then SIGUSR1, or a
// reload with SIGHUP) loses no line: every request answered is in the old file or the new one, once, with
// its query stripped and its fields in a fixed order. Workers write the file
// themselves, under the strict sandbox.
func TestAccessLogRotationLosesNoLine(t *testing.T) {
	dir := writeConfig(t, `
workers {
  count       = 2
  concurrency = 8
}
log {
  access_log_path   = "access.log"
  access_log_buffer = 4096
  access_log_flush  = "200ms"
}
sandbox {
  mode           = "strict"
  seccomp_action = "kill"
}
`)
	// The supervisor reopens the log as the account it dropped to (nobody
	// here), as logrotate's create would arrange: let it create the file.
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	p := startBinary(t, dir, 0, "-config", "gatehouse.hcl")
	p.waitServing(t, "/") // logged under another path than the clients'

	const clients, perClient, rotations = 4, 400, 5
	var served atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			cl := newClient(t, fmt.Sprintf("127.0.0.%d", 2+i), p.addr)
			defer cl.c.Close()
			for j := 0; j < perClient; j++ {
				resp, _, err := cl.get(fmt.Sprintf("/ok?token=secret%d", j))
				if err != nil || resp.StatusCode != 200 {
					errs <- fmt.Errorf("client %d request %d: %v", i, j, err)
					return
				}
				served.Add(1)
			}
		}(i)
	}
	// Rotate while the clients run: rename, then SIGUSR1, each after more
	// requests were answered and the previous reopen.
	rotated := 0
	for r := 1; r <= rotations; r++ {
		want := int64(r * clients * perClient / (rotations + 1))
		for deadline := time.Now().Add(60 * time.Second); served.Load() < want && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		if err := os.Rename(filepath.Join(dir, "access.log"), filepath.Join(dir, fmt.Sprintf("access.log.%d", r))); err != nil {
			t.Fatalf("rotation %d: %v", r, err)
		}
		sig := syscall.SIGUSR1
		if r == 3 {
			sig = syscall.SIGHUP // a reload reopens the log too
		}
		p.cmd.Process.Signal(sig)
		rotated++
		// The supervisor reopens, creating the file again.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if _, err := os.Stat(filepath.Join(dir, "access.log")); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("rotation %d: access.log not reopened within 10s", r)
			}
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.waitExit(t, 20*time.Second); code != 0 {
		t.Fatalf("exit status %d after SIGTERM", code)
	}

	files, _ := filepath.Glob(filepath.Join(dir, "access.log*"))
	if len(files) != rotations+1 {
		t.Errorf("%d access log files, want %d: %v", len(files), rotations+1, files)
	}
	lines, nonEmpty := 0, 0
	for _, name := range files {
		n := countAccessLines(t, name, "/ok")
		lines += n
		if n > 0 {
			nonEmpty++
		}
	}
	if int64(lines) != served.Load() || served.Load() != clients*perClient {
		t.Fatalf("%d access lines for %d requests served (%d sent), over %d files", lines, served.Load(), clients*perClient, len(files))
	}
	if nonEmpty < 3 {
		t.Errorf("only %d of %d files hold lines: the rotations did not switch the workers' descriptor", nonEmpty, len(files))
	}
	t.Logf("%d requests, %d rotations: %d lines in %d files", served.Load(), rotated, lines, len(files))
}

// countAccessLines checks every line of an access log file and counts those
// for the clients' requests (path /ok, a query sent and stripped).
func countAccessLines(t *testing.T, name, path string) int {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, "secret") || strings.Contains(line, "?") {
			t.Fatalf("%s: the query reached the log: %s", name, line)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("%s: not a JSON line (%v): %q", name, err, line)
		}
		dec := json.NewDecoder(strings.NewReader(line))
		dec.Token() // {
		for i := 0; dec.More(); i++ {
			k, _ := dec.Token()
			if i >= len(accessFields) || k != accessFields[i] {
				t.Fatalf("%s: field %d is %v, want the order %v: %s", name, i, k, accessFields, line)
			}
			var v any
			dec.Decode(&v)
		}
		if m["path"] == path && m["status"] == float64(200) && m["method"] == "GET" {
			n++
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

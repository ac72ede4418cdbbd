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
var accessFields = []string{"time", "worker", "client", "host", "method", "path", "proto", "status", "bytes", "duration_us", "referer", "user_agent"}

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
	// The file it created is its dropped account's, so that logrotate's
	// create gives the new file that owner and the reopen can open it.
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(dir, "access.log"), &st); err != nil || st.Uid == 0 {
		t.Errorf("access.log owned by uid %d (%v), want the supervisor's account", st.Uid, err)
	}

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
	if n := strings.Count(p.log(), "access log reopened"); n != rotations-1 {
		t.Errorf("%d INFO lines of a reopen, want one per SIGUSR1 (%d)", n, rotations-1)
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

// A worker holds nothing of the log it cannot abuse: not the access log's
// file, not the supervisor's standard output or error, and no descriptor it
// could read or seek; its access lines go out through the write end of a
// pipe of its own, which the supervisor copies to the file.
func TestWorkerHoldsNoLogDescriptor(t *testing.T) {
	h := start(t, `
workers {
  count = 2
}
log {
  access_log_buffer = 0
}
sandbox {
  mode           = "strict"
  seccomp_action = "kill"
}
`)
	cl := newClient(t, "127.0.0.2", h.addr)
	if resp, _, err := cl.get("/ok"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /ok: %v", err)
	}
	// What the worker must not hold: the file and the supervisor's (this
	// process's) standard descriptors, by device and inode.
	type ident struct{ dev, ino uint64 }
	forbidden := map[ident]string{}
	var st syscall.Stat_t
	if err := syscall.Stat(h.accessLog, &st); err != nil {
		t.Fatal(err)
	}
	forbidden[ident{st.Dev, st.Ino}] = "the access log file"
	for fd := 1; fd <= 2; fd++ {
		if syscall.Fstat(fd, &st) == nil && st.Mode&syscall.S_IFMT != syscall.S_IFCHR { // not /dev/null
			forbidden[ident{st.Dev, st.Ino}] = fmt.Sprintf("the supervisor's descriptor %d", fd)
		}
	}
	s := h.snapshot()
	for _, w := range s.Workers {
		dir := fmt.Sprintf("/proc/%d/fd", w.PID)
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		pipes := 0
		for _, e := range ents {
			target, _ := os.Readlink(filepath.Join(dir, e.Name()))
			if err := syscall.Stat(filepath.Join(dir, e.Name()), &st); err != nil {
				continue // closed meanwhile
			}
			if what, ok := forbidden[ident{st.Dev, st.Ino}]; ok {
				t.Errorf("worker %d holds %s as descriptor %s (%s)", w.Slot, what, e.Name(), target)
			}
			info, _ := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", w.PID, e.Name()))
			var flags int
			for _, line := range strings.Split(string(info), "\n") {
				if v, ok := strings.CutPrefix(line, "flags:"); ok {
					fmt.Sscanf(strings.TrimSpace(v), "%o", &flags)
				}
			}
			switch {
			case strings.HasPrefix(target, "pipe:"):
				// Its stdout and stderr (the relay's pipe) and its access log.
				if flags&syscall.O_ACCMODE != syscall.O_WRONLY {
					t.Errorf("worker %d: pipe %s (%s) open with flags %#o, want write-only", w.Slot, e.Name(), target, flags)
				}
				pipes++
			case st.Mode&syscall.S_IFMT == syscall.S_IFREG && flags&syscall.O_ACCMODE != syscall.O_RDONLY:
				t.Errorf("worker %d: file descriptor %s (%s) open for writing, flags %#o", w.Slot, e.Name(), target, flags)
			}
		}
		// 1 and 2 (one pipe, twice) and the access log's.
		if pipes != 3 {
			t.Errorf("worker %d holds %d pipe descriptors, want 3: its output twice and its access log", w.Slot, pipes)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); countAccessLines(t, h.accessLog, "/ok") != 1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the request's access line did not reach the file within 10 s:\n%s", tail(h.accessLog, 5))
		}
	}
}

// Each access line names the request's host, as nginx's $host (lower case,
// no port), so virtual hosts can be told apart: a JSON field, or the first
// field of vhost_combined. The query stays out unless access_log_query; with
// it, it is in the path. The supervisor's line check passes both formats.
func TestAccessLogHostAndQuery(t *testing.T) {
	for _, tt := range []struct {
		format string
		query  bool
		want   []string
	}{
		{"json", false, []string{`"host":"a.example","method":"GET","path":"/ok",`, `"host":"b.example","method":"GET","path":"/ok",`}},
		{"vhost_combined", true, []string{`a.example 127.0.0.2 - - [`, `b.example 127.0.0.2 - - [`, `"GET /ok?token=secret HTTP/1.1" 200`}},
	} {
		t.Run(tt.format, func(t *testing.T) {
			dir := writeConfig(t, fmt.Sprintf(`
log {
  access_log_path   = "access.log"
  access_log_format = %q
  access_log_query  = %v
  access_log_flush  = "10ms"
}
sandbox {
  mode           = "strict"
  seccomp_action = "kill"
}
`, tt.format, tt.query))
			p := startBinary(t, dir, 0, "-config", "gatehouse.hcl")
			p.waitServing(t, "/")
			cl := newClient(t, "127.0.0.2", p.addr)
			for _, host := range []string{"A.Example:8080", "b.example"} {
				cl.c.SetDeadline(time.Now().Add(10 * time.Second))
				fmt.Fprintf(cl.c, "GET /ok?token=secret HTTP/1.1\r\nHost: %s\r\n\r\n", host)
				if resp, _, err := readResponse(cl.br, "GET"); err != nil || resp.StatusCode != 200 {
					t.Fatalf("Host %s: %v %v", host, resp, err)
				}
			}
			var got string
			for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				b, _ := os.ReadFile(filepath.Join(dir, "access.log"))
				if got = string(b); strings.Count(got, "/ok") >= 2 {
					break
				}
			}
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("the access log lacks %q:\n%s\n%s", w, got, p.log())
				}
			}
			if !tt.query && strings.Contains(got, "secret") {
				t.Errorf("the query reached the log:\n%s", got)
			}
			if strings.Contains(p.log(), "not access lines") {
				t.Errorf("the supervisor rejected access lines:\n%s", p.log())
			}
		})
	}
}

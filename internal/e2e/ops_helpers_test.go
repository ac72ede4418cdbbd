package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/supervisor/adminapi"
)

// opsOptions describe one run of the gatehouse binary for the operating tests.
type opsOptions struct {
	args []string
	env  []string   // added to the test's environment, from which NOTIFY_SOCKET, LISTEN_* and WATCHDOG_* are removed
	fds  []*os.File // passed as descriptors 3, 4, …
	// listenPID runs gatehouse through /bin/sh so that LISTEN_PID is its
	// own pid, which is only known after the fork.
	listenPID bool
	// noWait returns at once instead of waiting for the first listener.
	noWait bool
	// nofile, when positive, runs gatehouse under `ulimit -n nofile`.
	nofile int
	// bin runs this gatehouse binary instead of gatehouseBin; cred runs it
	// as another account.
	bin  string
	cred *syscall.Credential
}

// startOps runs the gatehouse binary in dir and, unless noWait, waits for its
// first "listening" line.
func startOps(t *testing.T, dir string, o opsOptions) *proc {
	t.Helper()
	script := `exec "$0" "$@"`
	if o.listenPID {
		script = `LISTEN_PID=$$ ` + script
	}
	if o.nofile > 0 {
		script = fmt.Sprintf("ulimit -n %d && %s", o.nofile, script)
	}
	bin := gatehouseBin
	if o.bin != "" {
		bin = o.bin
	}
	cmd := exec.Command(bin, o.args...)
	if o.listenPID || o.nofile > 0 {
		cmd = exec.Command("/bin/sh", append([]string{"-c", script, bin}, o.args...)...)
	}
	if o.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: o.cred}
	}
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "NOTIFY_SOCKET" || strings.HasPrefix(k, "LISTEN_") || strings.HasPrefix(k, "WATCHDOG_") {
			continue
		}
		cmd.Env = append(cmd.Env, kv)
	}
	cmd.Env = append(cmd.Env, o.env...)
	cmd.ExtraFiles = o.fds
	// Not StderrPipe: Wait may close it before the last lines are read, and
	// a test that reads the log after the exit would miss them. Through an
	// io.Pipe, Wait returns only once everything was copied into it.
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	p := &proc{t: t, cmd: cmd, exited: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addrc := make(chan string, 1)
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.stderr.WriteString(line + "\n")
			p.mu.Unlock()
			if m := listeningRE.FindStringSubmatch(line); m != nil {
				select {
				case addrc <- m[1]:
				default:
				}
			}
		}
		io.Copy(io.Discard, pr)
	}()
	go func() {
		p.err = cmd.Wait()
		pw.Close()
		<-read
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.checkDeaths()
		cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("gatehouse stderr:\n%s", p.log())
		}
	})
	if o.noWait {
		return p
	}
	select {
	case p.addr = <-addrc:
	case <-p.exited:
		t.Fatalf("gatehouse exited: %v\n%s", p.err, p.log())
	case <-time.After(45 * time.Second):
		// Go prints every goroutine's stack on SIGQUIT: the log then
		// says where the start hung.
		cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-p.exited:
		case <-time.After(5 * time.Second):
		}
		t.Fatalf("gatehouse did not listen within 45s\n%s", p.log())
	}
	return p
}

// waitExit waits for the process to end and returns its exit status.
func (p *proc) waitExit(t *testing.T, limit time.Duration) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(limit):
		t.Fatalf("gatehouse still running after %v", limit)
	}
	var ee *exec.ExitError
	switch {
	case p.err == nil:
		return 0
	case errors.As(p.err, &ee):
		return ee.ExitCode()
	}
	t.Fatalf("waiting for gatehouse: %v", p.err)
	return -1
}

// opsGet sends one GET on a new connection and returns the status and body.
func opsGet(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", path)
	resp, body, err := readResponse(bufio.NewReader(c), "GET")
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, body
}

// writeOpsConfig writes gatehouse.hcl with one listener "http" at addr, the
// routes /ok and /v (body "one\n") and body, in a directory the workers'
// account can search. It returns the directory.
func writeOpsConfig(t *testing.T, addr, body string) string {
	t.Helper()
	dir := workerReadableTempDir(t)
	writeOpsFile(t, dir, addr, "one\n", body)
	return dir
}

func writeOpsFile(t *testing.T, dir, addr, v, body string) {
	t.Helper()
	src := fmt.Sprintf(`
listener "http" {
  address = %q
}
route "/ok" {
  respond {
    body = "ok\n"
  }
}
route "/v" {
  respond {
    body = %q
  }
}
`, addr, v) + body
	if err := os.WriteFile(filepath.Join(dir, "gatehouse.hcl"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
}

// opsFreeAddr returns a loopback address nothing listens on (at the moment).
func opsFreeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

var (
	ctlOnce sync.Once
	ctlPath string
	ctlErr  error
)

// ctlBin builds gatehousectl once, next to gatehouseBin.
func ctlBin(t *testing.T) string {
	t.Helper()
	ctlOnce.Do(func() {
		ctlPath = filepath.Join(filepath.Dir(gatehouseBin), "gatehousectl")
		out, err := exec.Command("go", "build", "-o", ctlPath, "github.com/gatehouse-dev/gatehouse/cmd/gatehousectl").CombinedOutput()
		if err != nil {
			ctlErr = fmt.Errorf("building gatehousectl: %v\n%s", err, out)
		}
	})
	if ctlErr != nil {
		t.Fatal(ctlErr)
	}
	return ctlPath
}

// ctlResult is one gatehousectl run.
type ctlResult struct {
	stdout, stderr string
	code           int
}

// ctl runs gatehousectl with args, as cred when it is not nil.
func ctl(t *testing.T, cred *syscall.Credential, bin string, args ...string) ctlResult {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(90 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("gatehousectl %v did not finish", args)
	}
	r := ctlResult{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("gatehousectl %v: %v", args, err)
	}
	return r
}

// ctlJSON runs gatehousectl -json and decodes the reply; it fails the test
// unless the reply is a success.
func ctlJSON(t *testing.T, sock string, args ...string) adminapi.Reply {
	t.Helper()
	r := ctl(t, nil, ctlBin(t), append([]string{"-socket", sock, "-json"}, args...)...)
	var reply adminapi.Reply
	if err := json.Unmarshal([]byte(r.stdout), &reply); err != nil {
		t.Fatalf("gatehousectl -json %v: output does not parse: %v\n%s%s", args, err, r.stdout, r.stderr)
	}
	if r.code != 0 || !reply.OK {
		t.Fatalf("gatehousectl -json %v: exit %d, reply %+v, stderr %s", args, r.code, reply, r.stderr)
	}
	return reply
}

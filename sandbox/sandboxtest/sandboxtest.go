// Package sandboxtest runs tests that apply a sandbox irreversibly. A test
// re-executes its own test binary in a child process (optionally in the
// worker's namespaces, with SpawnAttr's SysProcAttr), the child runs only
// that test, applies the sandbox and checks what it may do; the parent
// inspects the child from outside (/proc/PID) and checks how it ended.
//
//	func TestX(t *testing.T) {
//		if sandboxtest.InChild() {
//			// apply, check, maybe sandboxtest.Hold()
//			return
//		}
//		c := sandboxtest.Start(t, sandboxtest.Options{SysProcAttr: attr})
//		res := c.Wait(t)
//		res.Report(t) // or check res.Signal
//	}
package sandboxtest

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	envChild = "GATEHOUSE_SANDBOXTEST_CHILD" // the test name the child runs
	envArg   = "GATEHOUSE_SANDBOXTEST_ARG"   // Options.Arg
	// holdLine is what Hold prints on stdout.
	holdLine = "sandboxtest: holding"
	// waitTimeout bounds how long the parent waits for a child.
	waitTimeout = 60 * time.Second
)

// InChild reports whether this process is a child started by Start.
func InChild() bool { return os.Getenv(envChild) != "" }

// Arg returns Options.Arg as passed to the child ("" in the parent).
func Arg() string { return os.Getenv(envArg) }

// Options configure the child.
type Options struct {
	// SysProcAttr is set on the child's exec.Cmd (nil: none).
	SysProcAttr *syscall.SysProcAttr
	// Arg is handed to the child (see Arg); the child's environment holds
	// nothing else, as a worker's.
	Arg string
	// ExtraFiles become the child's fds 3, 4, … (exec.Cmd.ExtraFiles). The
	// caller keeps ownership and may close them after Start.
	ExtraFiles []*os.File
}

// Child is a running child test process.
type Child struct {
	Cmd *exec.Cmd
	Pid int

	stdin io.WriteCloser // closed by Release; Hold returns on EOF
	held  chan struct{}  // closed when the child prints holdLine
	done  chan struct{}  // closed when stdout reaches EOF

	mu  sync.Mutex
	out bytes.Buffer // +checklocks:mu
}

// Result is how a child ended.
type Result struct {
	Output   string         // the child's stdout and stderr
	Exited   bool           // it called exit
	ExitCode int            // if Exited
	Signal   syscall.Signal // if it was killed by a signal
}

// runPattern anchors each element of a test name for -test.run.
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

// Start re-executes the test binary through /proc/self/exe (so that a child
// running as an unprivileged uid need not search the build directory) to
// run only tb's test. The child is killed at cleanup if still running.
func Start(tb testing.TB, opts Options) *Child {
	tb.Helper()
	cmd := exec.Command("/proc/self/exe", "-test.run="+runPattern(tb.Name()), "-test.v=true", "-test.count=1")
	cmd.Args[0] = os.Args[0]
	cmd.Env = []string{envChild + "=" + tb.Name(), envArg + "=" + opts.Arg}
	cmd.SysProcAttr = opts.SysProcAttr
	cmd.ExtraFiles = opts.ExtraFiles
	cmd.Dir = "/"
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatalf("sandboxtest: %v", err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		tb.Fatalf("sandboxtest: %v", err)
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		tb.Fatalf("sandboxtest: starting child: %v", err)
	}
	pw.Close()
	c := &Child{Cmd: cmd, Pid: cmd.Process.Pid, stdin: stdin, held: make(chan struct{}), done: make(chan struct{})}
	go c.readOutput(pr)
	tb.Cleanup(func() {
		c.Release()
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return c
}

// readOutput collects the child's output until EOF and spots holdLine.
func (c *Child) readOutput(r *os.File) {
	defer close(c.done)
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	held := false
	for sc.Scan() {
		line := sc.Text()
		if !held && strings.Contains(line, holdLine) {
			held = true
			close(c.held)
			continue
		}
		c.mu.Lock()
		c.out.WriteString(line + "\n")
		c.mu.Unlock()
	}
}

// Output returns what the child has printed so far.
func (c *Child) Output() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.String()
}

// WaitHold waits until the child calls Hold and reports true, or until it
// ends without holding and reports false.
func (c *Child) WaitHold(tb testing.TB) bool {
	tb.Helper()
	select {
	case <-c.held:
		return true
	case <-c.done:
		select {
		case <-c.held:
			return true
		default:
			return false
		}
	case <-time.After(waitTimeout):
		tb.Fatalf("sandboxtest: child did not hold within %v; output:\n%s", waitTimeout, c.Output())
		return false
	}
}

// Release lets a holding child continue. It is safe to call twice.
func (c *Child) Release() { c.stdin.Close() }

// Wait releases the child, waits for it to end and returns how it ended.
func (c *Child) Wait(tb testing.TB) Result {
	tb.Helper()
	c.Release()
	errc := make(chan error, 1)
	go func() { <-c.done; errc <- c.Cmd.Wait() }()
	var err error
	select {
	case err = <-errc:
	case <-time.After(waitTimeout):
		c.Cmd.Process.Kill()
		tb.Fatalf("sandboxtest: child did not exit within %v; output:\n%s", waitTimeout, c.Output())
	}
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		tb.Fatalf("sandboxtest: waiting for child: %v", err)
	}
	res := Result{Output: c.Output()}
	ws := c.Cmd.ProcessState.Sys().(syscall.WaitStatus)
	switch {
	case ws.Exited():
		res.Exited, res.ExitCode = true, ws.ExitStatus()
	case ws.Signaled():
		res.Signal = ws.Signal()
	}
	return res
}

// Report forwards the child's test outcome to tb: a failed or crashed child
// fails tb with its output, a skipped child skips tb.
func (r Result) Report(tb testing.TB) {
	tb.Helper()
	switch {
	case r.Signal != 0:
		tb.Fatalf("child killed by %v; output:\n%s", r.Signal, r.Output)
	case r.ExitCode != 0 || strings.Contains(r.Output, "--- FAIL"):
		tb.Fatalf("child failed (exit %d); output:\n%s", r.ExitCode, r.Output)
	case strings.Contains(r.Output, "--- SKIP"):
		tb.Skipf("skipped in child:\n%s", r.Output)
	}
}

// Hold, in a child, tells the parent it reached a checkpoint (WaitHold
// returns) and blocks until the parent calls Release or Wait. It uses only
// write(1) and read(0), so it works under the sandbox.
func Hold() {
	os.Stdout.WriteString("\n" + holdLine + "\n")
	io.Copy(io.Discard, os.Stdin)
}

// RunInSubprocess runs f in a child that runs only t's test and reports the
// child's outcome to t, like go-landlock's lltest.RunInSubprocess. In the
// child it just calls f.
func RunInSubprocess(t *testing.T, opts Options, f func()) {
	t.Helper()
	if InChild() {
		f()
		return
	}
	Start(t, opts).Wait(t).Report(t)
}

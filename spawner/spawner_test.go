package spawner

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/sandbox"
	"golang.org/x/sys/unix"
)

// TestMain runs the spawner, or the program it spawns, when re-executed.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case Arg:
			os.Exit(Main())
		case "sleeper":
			// A stand-in worker: reports on its output pipe, then waits
			// for its channel (fd 3) to close.
			os.Stdout.WriteString("sleeper started\n")
			b := make([]byte, 1)
			unix.Read(3, b)
			os.Exit(0)
		}
	}
	if err := sandbox.CheckBuild(); err != nil {
		// The spawner sets no_new_privs, which a cgo build cannot.
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	os.Exit(m.Run())
}

func startClient(t *testing.T) *Client {
	t.Helper()
	c, refused, err := Start(Options{Path: "/proc/self/exe", Args: []string{Arg}, Stderr: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	t.Logf("spawner pid %d, user namespaces refused: %q", c.PID(), refused)
	return c
}

// spawnSleeper starts a stand-in worker in best-effort mode, returning its
// pid, its exit channel and the supervisor's end of its channel.
func spawnSleeper(t *testing.T, c *Client) (int, <-chan Exit, *os.File) {
	t.Helper()
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ours, theirs := os.NewFile(uintptr(pair[0]), "ours"), os.NewFile(uintptr(pair[1]), "theirs")
	t.Cleanup(func() { ours.Close() })
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	pid, exit, err := c.Spawn([]string{"sleeper", "-sandbox.mode=best-effort"}, theirs, pw, nil)
	theirs.Close()
	pw.Close()
	if err != nil {
		t.Fatalf("Spawn: %v", err)
	}
	line, err := bufio.NewReader(pr).ReadString('\n')
	pr.Close()
	if line != "sleeper started\n" {
		t.Fatalf("worker output %q, %v", line, err)
	}
	return pid, exit, ours
}

func waitExit(t *testing.T, exit <-chan Exit) Exit {
	t.Helper()
	select {
	case e := <-exit:
		return e
	case <-time.After(20 * time.Second):
		t.Fatal("no exit reported within 20s")
	}
	return Exit{}
}

// The spawner starts a worker, reports its end, kills it on request and
// kills nothing it did not start.
func TestSpawnAndKill(t *testing.T) {
	c := startClient(t)
	pid, exit, ch := spawnSleeper(t, c)
	// A kill for a pid it did not start (here: its own parent, the test)
	// is ignored.
	if err := c.Kill(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	if err := c.Kill(pid); err != nil {
		t.Fatal(err)
	}
	if e := waitExit(t, exit); e.Err != nil || e.Signal != syscall.SIGKILL {
		t.Errorf("exit = %+v, want SIGKILL", e)
	}
	ch.Close()
	// A worker that ends by itself is reported with its status.
	_, exit, ch = spawnSleeper(t, c)
	ch.Close()
	if e := waitExit(t, exit); e.Err != nil || e.Signal != 0 || e.Code != 0 {
		t.Errorf("exit = %+v, want status 0", e)
	}
}

// When the supervisor's end closes, the spawner kills every worker it
// started and exits; pending waits learn that it is gone.
func TestCloseKillsWorkers(t *testing.T) {
	c := startClient(t)
	pid, exit, _ := spawnSleeper(t, c)
	c.Close()
	e := waitExit(t, exit)
	if e.Err == nil && e.Signal != syscall.SIGKILL {
		t.Errorf("exit = %+v, want SIGKILL or the spawner gone", e)
	}
	for i := 0; i < 400; i++ {
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err != nil || strings.Contains(string(b), ") Z ") {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("worker %d outlived its spawner", pid)
}

// A request the spawner does not know ends it: the supervisor is then
// broken or compromised, and its workers die with the spawner.
func TestUnknownRequestEndsSpawner(t *testing.T) {
	c := startClient(t)
	_, exit, _ := spawnSleeper(t, c)
	c.sendMu.Lock()
	err := send(c.fd, message{Op: "exec", Args: []string{"/bin/sh"}})
	c.sendMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if e := waitExit(t, exit); e.Err == nil && e.Signal != syscall.SIGKILL {
		t.Errorf("exit = %+v, want the worker killed with the spawner", e)
	}
	if _, _, err := c.Spawn([]string{"sleeper"}, os.Stdin, os.Stdout, nil); err == nil {
		t.Errorf("Spawn after an unknown request succeeded")
	}
}

// Where the kernel refuses its account user namespaces, the supervisor
// starts the spawner keeping CAP_SYS_ADMIN: as the workers' account, with
// that one capability and no other.
func TestAmbientSysAdmin(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("starting the spawner as another account needs root")
	}
	const id = 65530
	c, _, err := Start(Options{
		Path: "/proc/self/exe", Args: []string{Arg}, Stderr: os.Stderr,
		Credential:  &syscall.Credential{Uid: id, Gid: id, Groups: []uint32{}},
		AmbientCaps: []uintptr{unix.CAP_SYS_ADMIN},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(c.PID()) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"Uid": "65530 65530 65530 65530", "CapEff": "0000000000200000", "CapAmb": "0000000000200000", "NoNewPrivs": "1"}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		if w, ok := want[k]; ok {
			if got := strings.Join(strings.Fields(v), " "); got != w {
				t.Errorf("spawner %s = %q, want %q", k, got, w)
			}
		}
	}
}

// A spawner that never speaks fails the wait within its bound; one that
// speaks, or closes its end, ends it at once.
func TestWaitReadable(t *testing.T) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pair[0])
	if err := waitReadable(pair[0], 50*time.Millisecond); err == nil {
		t.Fatal("silent peer: no error")
	}
	if _, err := unix.Write(pair[1], []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := waitReadable(pair[0], 10*time.Second); err != nil {
		t.Fatalf("peer spoke: %v", err)
	}
	unix.Close(pair[1])
	if err := waitReadable(pair[0], 10*time.Second); err != nil {
		t.Fatalf("peer closed: %v", err)
	}
}

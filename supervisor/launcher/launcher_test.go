package launcher

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// rootDir is a directory that passes checkDirs: root's, mode 0755, under
// the system's temporary directory (sticky).
func rootDir(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the launcher's checks need files owned by root")
	}
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func writeExe(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte("\x7fELF"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func TestOpenCheckedRefusals(t *testing.T) {
	dir := rootDir(t)
	good := filepath.Join(dir, "gatehouse")
	writeExe(t, good, 0o755)
	if f, err := openChecked(good); err != nil {
		t.Fatalf("root's 0755 file in root's 0755 directory: %v", err)
	} else {
		f.Close()
	}

	groupWritable := filepath.Join(dir, "gw")
	writeExe(t, groupWritable, 0o775)
	notExec := filepath.Join(dir, "noexec")
	writeExe(t, notExec, 0o644)
	owned := filepath.Join(dir, "owned")
	writeExe(t, owned, 0o755)
	if err := os.Chown(owned, 65532, 65532); err != nil {
		t.Fatal(err)
	}
	openDir := filepath.Join(dir, "open")
	if err := os.Mkdir(openDir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(openDir, 0o777); err != nil {
		t.Fatal(err)
	}
	inOpen := filepath.Join(openDir, "gatehouse")
	writeExe(t, inOpen, 0o755)
	theirDir := filepath.Join(dir, "theirs")
	if err := os.Mkdir(theirDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(theirDir, 65532, 65532); err != nil {
		t.Fatal(err)
	}
	inTheirs := filepath.Join(theirDir, "gatehouse")
	writeExe(t, inTheirs, 0o755)
	// A link from root's directory into one another account may write.
	link := filepath.Join(dir, "link")
	if err := os.Symlink(inOpen, link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, want string }{
		{groupWritable, "writable by group or others"},
		{notExec, "not executable"},
		{owned, "owned by uid 65532"},
		{inOpen, "directory " + openDir + " is writable"},
		{inTheirs, "directory " + theirDir + " is owned by uid 65532"},
		{link, "directory " + openDir + " is writable"},
		{dir, "not a regular file"},
	} {
		f, err := openChecked(c.path)
		if err == nil {
			f.Close()
			t.Errorf("%s accepted", c.path)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.path, err, c.want)
		}
	}
	// A sticky world-writable directory (as /tmp) is accepted: no one
	// else can replace root's entries in it.
	sticky := filepath.Join(dir, "sticky")
	if err := os.Mkdir(sticky, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sticky, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	inSticky := filepath.Join(sticky, "gatehouse")
	writeExe(t, inSticky, 0o755)
	if f, err := openChecked(inSticky); err != nil {
		t.Errorf("root's file in a sticky directory: %v", err)
	} else {
		f.Close()
	}
}

func TestRequestWire(t *testing.T) {
	r, err := decodeRequest(request{op: opLaunch}.encode())
	if err != nil || r.op != opLaunch {
		t.Fatalf("round trip: %+v %v", r, err)
	}
	// Anything longer, such as a request naming a path, or with another
	// magic, is refused: the format has no room for a path.
	long := append(request{op: opLaunch}.encode(), []byte("/tmp/evil")...)
	bad := request{op: opLaunch}.encode()
	bad[0] ^= 0xff
	for _, b := range [][]byte{long, bad, nil, {1, 2, 3}} {
		if _, err := decodeRequest(b); err == nil {
			t.Errorf("request %q accepted", b)
		}
	}
	resp, err := decodeResponse(response{kind: kindRefused, reason: "no"}.encode())
	if err != nil || resp.kind != kindRefused || resp.reason != "no" {
		t.Errorf("response round trip: %+v %v", resp, err)
	}
}

// TestServerRefuses runs the launcher's loop on a socketpair: a request with
// a path appended, one without a descriptor and a launch of a binary in a
// directory others may write are refused, and nothing is started.
func TestServerRefuses(t *testing.T) {
	dir := rootDir(t)
	openDir := filepath.Join(dir, "open")
	if err := os.Mkdir(openDir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(openDir, 0o777); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(openDir, "gatehouse")
	writeExe(t, exe, 0o755)
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pair[0])
	s := &server{fd: pair[1], exe: exe, config: "gatehouse.hcl"}
	done := make(chan struct{})
	go func() {
		s.serve()
		close(done)
	}()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	ask := func(b []byte, fds ...int) response {
		t.Helper()
		var oob []byte
		if len(fds) > 0 {
			oob = unix.UnixRights(fds...)
		}
		if err := unix.Sendmsg(pair[0], b, oob, nil, 0); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, responseSize+1)
		n, err := unix.Read(pair[0], buf)
		if err != nil {
			t.Fatal(err)
		}
		r, err := decodeResponse(buf[:n])
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	withPath := append(request{op: opLaunch}.encode(), []byte("/bin/sh")...)
	for _, c := range []struct {
		name string
		b    []byte
		fds  []int
		want string
	}{
		{"a path appended", withPath, []int{int(devnull.Fd())}, "malformed request"},
		{"no descriptor", request{op: opLaunch}.encode(), nil, "not one descriptor"},
		{"a writable directory", request{op: opLaunch}.encode(), []int{int(devnull.Fd())}, "is writable by group or others"},
	} {
		r := ask(c.b, c.fds...)
		if r.kind != kindRefused || !strings.Contains(r.reason, c.want) {
			t.Errorf("%s: %+v, want refused with %q", c.name, r, c.want)
		}
	}
	s.mu.Lock()
	if s.child != nil {
		t.Errorf("a process was started: pid %d", s.child.Pid)
	}
	s.mu.Unlock()
	unix.Shutdown(pair[0], syscall.SHUT_RDWR)
	<-done
}

// childEnv makes the test binary, started by the launcher, stand in for a
// new gatehouse: it checks its arguments, then waits for its fd 3 to close.
const childEnv = "GATEHOUSE_LAUNCHER_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		want := []string{"-upgrade-fd", "3", "-config", "gatehouse.hcl"}
		if !slices.Equal(os.Args[1:], want) {
			os.Exit(3)
		}
		buf := make([]byte, 1)
		for {
			if n, err := unix.Read(3, buf); n == 0 || (err != nil && err != unix.EINTR) {
				os.Exit(0)
			}
		}
	}
	os.Exit(m.Run())
}

// TestClientLaunch starts the test binary, installed as root's, through a
// real launcher loop: the first launch starts it with the recorded
// arguments, a second is refused while it runs, Kill ends it and the exit
// is reported, and a launch is possible again.
func TestClientLaunch(t *testing.T) {
	dir := rootDir(t)
	exe := filepath.Join(dir, "gatehouse")
	self, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, self, 0o755); err != nil {
		t.Fatal(err)
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	s := &server{fd: pair[1], exe: exe, config: "gatehouse.hcl", env: []string{childEnv + "=1"}}
	go s.serve()
	c := &Client{fd: pair[0], replies: make(chan reply, 1), gone: make(chan struct{})}
	go c.read()
	defer unix.Shutdown(pair[0], syscall.SHUT_RDWR)

	hand := func() (*os.File, *os.File) {
		t.Helper()
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		return os.NewFile(uintptr(fds[0]), "ours"), os.NewFile(uintptr(fds[1]), "theirs")
	}
	ours, theirs := hand()
	defer ours.Close()
	pid, exited, err := c.Launch(theirs)
	theirs.Close()
	if err != nil || pid <= 0 {
		t.Fatalf("launch: pid %d, %v", pid, err)
	}
	ours2, theirs2 := hand()
	defer ours2.Close()
	if _, _, err := c.Launch(theirs2); err == nil || !strings.Contains(err.Error(), "in flight") {
		t.Errorf("a second launch while the first runs: %v", err)
	}
	theirs2.Close()
	c.Kill()
	select {
	case err := <-exited:
		if err == nil || !strings.Contains(err.Error(), "killed") {
			t.Errorf("killed launch reported as %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no exit reported after Kill")
	}
	// Free again: this one checks its arguments and exits once its
	// hand-over socket closes.
	ours3, theirs3 := hand()
	_, exited, err = c.Launch(theirs3)
	theirs3.Close()
	if err != nil {
		t.Fatalf("launch after the first ended: %v", err)
	}
	ours3.Close()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("launched binary: %v (exit status 3: wrong arguments)", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the launched binary did not exit when its hand-over socket closed")
	}
}

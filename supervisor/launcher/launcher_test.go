package launcher

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

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

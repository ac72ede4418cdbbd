package admin

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/supervisor/adminapi"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

func TestPeerAllowed(t *testing.T) {
	tests := []struct {
		uid, self int
		want      bool
	}{
		{0, 0, true},
		{0, 1000, true},        // root may always
		{1000, 1000, true},     // the supervisor's own user
		{65534, 0, false},      // nobody against a root supervisor
		{65534, 1000, false},   // another user
		{1000, 0, false},       // a user against a root supervisor
		{-1, 1000, false},      // an unknown peer
		{1001, 1000, false},    // a neighbouring uid
		{4294967294, 0, false}, // a large uid
	}
	for _, tt := range tests {
		if got := peerAllowed(tt.uid, tt.self); got != tt.want {
			t.Errorf("peerAllowed(uid %d, self %d) = %v, want %v", tt.uid, tt.self, got, tt.want)
		}
	}
}

func TestParseRequest(t *testing.T) {
	tests := []struct {
		line    string
		want    adminapi.Request
		wantErr string
	}{
		{`{"command":"status"}` + "\n", adminapi.Request{Command: "status"}, ""},
		{`{"command":"clients","args":["5"]}`, adminapi.Request{Command: "clients", Args: []string{"5"}}, ""},
		{`{"command":"log-level","args":["debug"]}` + "\r\n", adminapi.Request{Command: "log-level", Args: []string{"debug"}}, ""},
		{"not json\n", adminapi.Request{}, "malformed request"},
		{"\n", adminapi.Request{}, "malformed request"},
		{`{"command":"status","extra":1}`, adminapi.Request{}, "unknown field"},
		{`{"command":"status"} {"command":"drain"}`, adminapi.Request{}, "more than one"},
		{`{"args":["x"]}`, adminapi.Request{}, "no command"},
		{`{"command":7}`, adminapi.Request{}, "malformed request"},
		{`["status"]`, adminapi.Request{}, "malformed request"},
	}
	for _, tt := range tests {
		var got adminapi.Request
		err := parseRequest([]byte(tt.line), &got)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("parseRequest(%q) error = %v, want one containing %q", tt.line, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got.Command != tt.want.Command || strings.Join(got.Args, ",") != strings.Join(tt.want.Args, ",") {
			t.Errorf("parseRequest(%q) = %+v, %v; want %+v", tt.line, got, err, tt.want)
		}
	}
}

// loopless is a supervisor whose loop never answers: enough for the
// protocol, log-level and every error path that needs no View.
type loopless struct{}

func (loopless) View(context.Context) (View, error) { return nil, errors.New("no loop") }
func (loopless) Reload(context.Context) error       { return errors.New("no loop") }
func (loopless) CertificateErrors() []string        { return nil }
func (loopless) Drain()                             {}
func (loopless) SetLogLevel(level string) error {
	if hclog.LevelFromString(level) == hclog.NoLevel {
		return fmt.Errorf("unknown log level %q", level)
	}
	return nil
}

// testAdmin serves an admin socket for a loopless supervisor.
func testAdmin(t *testing.T) (*Server, string) {
	t.Helper()
	log := hclog.New(&hclog.LoggerOptions{Output: &strings.Builder{}, Level: hclog.Info})
	path := filepath.Join(t.TempDir(), "admin.sock")
	a, err := Listen(Options{Path: path, Logger: log, Reload: func(context.Context) error { return errors.New("no file") }, Drain: func() {}})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- a.Serve(loopless{}) }()
	t.Cleanup(func() {
		a.Close()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return a, path
}

// adminConn is a raw client connection.
type adminConn struct {
	c  net.Conn
	br *bufio.Reader
}

func dialAdmin(t *testing.T, path string) *adminConn {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return &adminConn{c: c, br: bufio.NewReader(c)}
}

// roundTrip writes line and reads one reply.
func (a *adminConn) roundTrip(t *testing.T, line string) adminapi.Reply {
	t.Helper()
	if _, err := a.c.Write([]byte(line)); err != nil {
		t.Fatalf("write: %v", err)
	}
	return a.read(t)
}

func (a *adminConn) read(t *testing.T) adminapi.Reply {
	t.Helper()
	raw, err := a.br.ReadBytes('\n')
	if err != nil {
		t.Fatalf("reading reply: %v (got %q)", err, raw)
	}
	var r adminapi.Reply
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatalf("reply %q is not JSON: %v", raw, err)
	}
	if r.OK != (r.Error == "") {
		t.Fatalf("reply %q: ok and error disagree", raw)
	}
	return r
}

// expectEOF checks that the server closed the connection.
func (a *adminConn) expectEOF(t *testing.T) {
	t.Helper()
	if b, err := a.br.ReadByte(); err == nil {
		t.Fatalf("connection still open: read %q", b)
	}
}

// The socket is created 0600 even under a permissive umask, with no chmod
// by path afterwards that a swapped-in symlink could redirect.
func TestAdminSocketMode(t *testing.T) {
	old := unix.Umask(0)
	_, path := testAdmin(t)
	unix.Umask(old)
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Errorf("admin socket mode %v, want socket 0600", fi.Mode())
	}
}

// A missing directory is an error, and none is created: root creating it
// would leave it behind.
func TestAdminSocketMissingDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	_, err := Listen(Options{Path: filepath.Join(dir, "admin.sock")})
	if !errors.Is(err, ErrBind) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Listen under a missing directory: %v, want ErrBind and ErrNotExist", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the directory was created: %v", err)
	}
}

func TestAdminProtocolErrors(t *testing.T) {
	_, path := testAdmin(t)
	tests := []struct {
		name, line, wantErr string
		closes              bool
	}{
		{"not JSON", "not json\n", "malformed request", true},
		{"oversized", strings.Repeat("x", 8<<10) + "\n", "longer than 4096", true},
		{"oversized JSON", `{"command":"status","args":["` + strings.Repeat("a", 5000) + `"]}` + "\n", "longer than 4096", true},
		{"unknown field", `{"command":"status","please":true}` + "\n", "unknown field", true},
		{"two objects", `{"command":"status"}{"command":"drain"}` + "\n", "more than one", true},
		{"unknown command", `{"command":"reboot"}` + "\n", `unknown command "reboot"`, false},
		{"extra argument", `{"command":"status","args":["now"]}` + "\n", "usage: status", false},
		{"bad level", `{"command":"log-level","args":["loud"]}` + "\n", "unknown log level", false},
		{"clients not a number", `{"command":"clients","args":["many"]}` + "\n", "usage: clients", false},
		{"reload error", `{"command":"reload"}` + "\n", "reload failed, the running configuration stays: no file", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := dialAdmin(t, path)
			r := c.roundTrip(t, tt.line)
			if r.OK || !strings.Contains(r.Error, tt.wantErr) {
				t.Fatalf("reply %+v, want an error containing %q", r, tt.wantErr)
			}
			if tt.closes {
				c.expectEOF(t)
				return
			}
			// A well-formed request keeps the connection.
			if r := c.roundTrip(t, `{"command":"log-level","args":["warn"]}`+"\n"); !r.OK || r.Message != "log level set to warn" {
				t.Fatalf("next request on the connection: %+v", r)
			}
		})
	}
	// Still serving.
	if r := dialAdmin(t, path).roundTrip(t, `{"command":"log-level","args":["info"]}`+"\n"); !r.OK {
		t.Fatalf("after the errors: %+v", r)
	}
}

// A request line may end at EOF instead of a newline.
func TestAdminRequestAtEOF(t *testing.T) {
	_, path := testAdmin(t)
	c := dialAdmin(t, path)
	c.c.Write([]byte(`{"command":"log-level","args":["debug"]}`))
	c.c.(*net.UnixConn).CloseWrite()
	if r := c.read(t); !r.OK {
		t.Fatalf("reply %+v", r)
	}
	c.expectEOF(t)
}

// At most adminMaxConns connections are served at once; one more gets an
// error and is closed. A silent connection is closed after adminapi.Timeout.
func TestAdminConnectionLimitAndStall(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the 5 s admin timeout")
	}
	_, path := testAdmin(t)
	var held []*adminConn
	for range adminMaxConns {
		c := dialAdmin(t, path)
		if r := c.roundTrip(t, `{"command":"log-level","args":["info"]}`+"\n"); !r.OK {
			t.Fatalf("reply %+v", r)
		}
		held = append(held, c)
	}
	extra := dialAdmin(t, path)
	if r := extra.read(t); r.OK || !strings.Contains(r.Error, "too many admin connections") {
		t.Fatalf("connection over the limit: %+v", r)
	}
	extra.expectEOF(t)
	began := time.Now()
	for _, c := range held {
		c.expectEOF(t)
	}
	if d := time.Since(began); d > adminapi.Timeout+2*time.Second {
		t.Errorf("stalled connections closed after %v, want about %v", d, adminapi.Timeout)
	}
	// Slots are free again.
	if r := dialAdmin(t, path).roundTrip(t, `{"command":"log-level","args":["info"]}`+"\n"); !r.OK {
		t.Fatalf("after the stall: %+v", r)
	}
}

func TestAdminStaleSocket(t *testing.T) {
	a, path := testAdmin(t)
	// A second server on the same path refuses: the first answers.
	if _, err := Listen(Options{Path: path}); err == nil || !errors.Is(err, ErrBind) || !strings.Contains(err.Error(), "another process") {
		t.Fatalf("second Listen on a live socket: %v", err)
	}
	// Close removes the file.
	a.Close()
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("socket file after Close: %v", err)
	}
	// A stale socket file (bound, nobody listening) is replaced.
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	b, err := Listen(Options{Path: path})
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	b.Close()
	// A regular file is never removed.
	os.WriteFile(path, []byte("keep"), 0o644)
	if _, err := Listen(Options{Path: path}); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("Listen over a regular file: %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "keep" {
		t.Fatal("regular file was touched")
	}
}

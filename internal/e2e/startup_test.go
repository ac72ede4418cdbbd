package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/supervisor/view"
)

// A configuration on which no worker can start is an error, not a crash
// loop: `gatehouse -check` and a started gatehouse both exit 2 with a message
// naming the key, file:line and the reason; the started one never sends
// READY=1 and says why on its STATUS= line.
func TestStartupRefusesUnstartableConfigs(t *testing.T) {
	const listener = "listener \"http\" {\n  address = \"127.0.0.1:0\"\n}\n"
	ok := "route \"/ok\" {\n  respond {\n    body = \"ok\\n\"\n  }\n}\n"
	for _, tc := range []struct {
		name string
		// setup prepares dir and returns the file's text ("" runs the
		// built-in configuration) and the texts the message must hold.
		setup func(t *testing.T, dir string) (src string, want []string)
		// after checks dir once gatehouse has exited.
		after func(t *testing.T, dir string)
	}{
		{"root-closed", func(t *testing.T, dir string) (string, []string) {
			if err := os.MkdirAll(filepath.Join(dir, "private", "www"), 0o755); err != nil {
				t.Fatal(err)
			}
			// Started as root, the workers run as their own account, whom
			// a root of mode 0700 keeps out (a directory above it does
			// not: gatehouse opens the root and hands it over);
			// otherwise as gatehouse's own account, which only mode 0
			// above the root keeps out.
			closed, mode, who := filepath.Join(dir, "private", "www"), os.FileMode(0o700), "workers' account"
			if os.Geteuid() != 0 {
				closed, mode, who = filepath.Join(dir, "private"), 0, "supervisor's account"
			}
			if err := os.Chmod(closed, mode); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Chmod(closed, 0o755) })
			return listener + "route \"/\" {\n  static {\n    root = \"private/www\"\n  }\n}\n", []string{
				"gatehouse.hcl:6,", `static.root "` + filepath.Join(dir, "private", "www") + `"`,
				fmt.Sprintf("directory %q has mode %04o", closed, mode), who,
			}
		}, nil},
		{"embedded-nothing", func(t *testing.T, dir string) (string, []string) {
			return listener + ok + "route \"/app\" {\n  embedded {\n    name = \"nothing\"\n  }\n}\n", []string{
				"gatehouse.hcl:11,", `embedded.name "nothing"`, "has no embedded handlers",
			}
		}, nil},
		{"chroot-nonexistent", func(t *testing.T, dir string) (string, []string) {
			return listener + ok + "sandbox {\n  chroot = \"/nonexistent\"\n}\n", []string{
				"gatehouse.hcl:10,", `sandbox.chroot "/nonexistent": no such file or directory`,
			}
		}, nil},
		{"user-unknown", func(t *testing.T, dir string) (string, []string) {
			return listener + ok + "user = \"nosuchuser\"\n", []string{
				"gatehouse.hcl:9,", `user "nosuchuser"`, "not found in /etc/passwd",
			}
		}, nil},
		{"builtin-elsewhere", func(t *testing.T, dir string) (string, []string) {
			return "", []string{
				"default.hcl:10,", `static.root "` + filepath.Join(dir, "examples", "www") + `": no such file or directory`,
			}
		}, nil},
		{"tls-certificates", func(t *testing.T, dir string) (string, []string) {
			// Every broken certificate of every listener, each at its
			// block, with the file's other errors.
			a := writeCert(t, dir, "a", false, "a.test")
			b := writeCert(t, dir, "b", false, "b.test")
			for _, f := range []string{a.key, b.key} {
				if err := os.Chown(f, 65534, 65534); err != nil {
					t.Fatal(err)
				}
			}
			src := ok + "user = \"nobody\"\nworkers {\n  count = 0\n}\n" +
				tlsListener("a", "a.pem", "b.key") + tlsListener("b", "missing.pem", "b.key")
			return src, []string{
				blockAt(src, "a"), "the key in " + b.key + ":1 does not match the certificate in " + a.cert + ":1",
				blockAt(src, "b"), "open " + filepath.Join(dir, "missing.pem") + ": no such file or directory",
				"gatehouse.hcl:8,", "workers.count",
			}
		}, nil},
		{"tls-key-root-only", func(t *testing.T, dir string) (string, []string) {
			if os.Geteuid() != 0 {
				t.Skip("started as root, the supervisor reads its keys again as its user on every reload")
			}
			writeCert(t, dir, "a", false, "a.test") // the key root's, mode 0600
			src := ok + "user = \"nobody\"\n" + tlsListener("a", "a.pem", "a.key")
			return src, []string{
				blockAt(src, "a"), "reading as nobody (uid 65534, gid 65534): open " + filepath.Join(dir, "a.key") + ": permission denied",
				"reads the files again on every reload",
			}
		}, nil},
		{"upload-without-token", func(t *testing.T, dir string) (string, []string) {
			return listener + ok + "route \"/up/\" {\n  max_upload_bytes = 1048576\n  respond {}\n}\n", []string{
				"gatehouse.hcl:10,", `route "/up/": max_upload_bytes`, "upload_token_sha256 lists none, so every larger upload would get 401",
			}
		}, nil},
		{"error-page-missing", func(t *testing.T, dir string) (string, []string) {
			return listener + ok + "error_page {\n  status = [404]\n  file = \"errors/404.html\"\n}\n", []string{
				"gatehouse.hcl:11,", `error_page.file directory "` + filepath.Join(dir, "errors") + `": no such file or directory`,
			}
		}, nil},
		{"admin-dir", func(t *testing.T, dir string) (string, []string) {
			return listener + ok + "admin {\n  socket = \"run/gh/admin.sock\"\n}\n", []string{
				"gatehouse.hcl:10,", `admin.socket "` + filepath.Join(dir, "run", "gh", "admin.sock") + `"`, "does not create it",
			}
		}, func(t *testing.T, dir string) {
			if _, err := os.Stat(filepath.Join(dir, "run")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a directory was created for the admin socket: %v", err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := workerReadableTempDir(t)
			src, want := tc.setup(t, dir)
			var args []string
			if src != "" {
				if err := os.WriteFile(filepath.Join(dir, "gatehouse.hcl"), []byte(src), 0o644); err != nil {
					t.Fatal(err)
				}
				args = []string{"-config", "gatehouse.hcl"}
			}
			check := func(what, out string, code int) {
				t.Helper()
				if code != 2 {
					t.Errorf("%s: exit %d, want 2\n%s", what, code, out)
				}
				for _, w := range want {
					if !strings.Contains(out, w) {
						t.Errorf("%s: output lacks %q:\n%s", what, w, out)
					}
				}
			}

			// -check
			cmd := exec.Command(gatehouseBin, append(args, "-check")...)
			cmd.Dir = dir
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			check("-check", out.String(), code)

			// Started under a service manager.
			n := newNotifySocket(t)
			p := startOps(t, dir, opsOptions{args: args, env: []string{"NOTIFY_SOCKET=" + n.path}, noWait: true})
			code = p.waitExit(t, 20*time.Second)
			check("start", p.log(), code)
			// The datagram was sent before the exit; wait for the reader.
			st := ""
			for i := 0; i < 250 && st == ""; i++ {
				if st = statusOf(lastStatus(n.history())); st == "" {
					time.Sleep(20 * time.Millisecond)
				}
			}
			if !strings.HasPrefix(st, "failed to start: ") || !strings.Contains(st, want[0]) {
				t.Errorf("STATUS=%q, want the failure with %q", st, want[0])
			}
			for _, m := range n.history() {
				if hasLine(m, "READY=1") {
					t.Errorf("READY=1 was sent: %q", n.history())
				}
			}
			if tc.after != nil {
				tc.after(t, dir)
			}
		})
	}
}

// tlsListener is a listener block named name on a free port of 127.0.0.1
// with one certificate block, also named name.
func tlsListener(name, cert, key string) string {
	return fmt.Sprintf("listener %q {\n  address = \"127.0.0.1:0\"\n  tls {\n    certificate %q {\n      cert = %q\n      key  = %q\n    }\n  }\n}\n", name, name, cert, key)
}

// blockAt is "gatehouse.hcl:N,", the start of the certificate block name.
func blockAt(src, name string) string {
	for i, l := range strings.Split(src, "\n") {
		if strings.Contains(l, fmt.Sprintf("certificate %q", name)) {
			return fmt.Sprintf("gatehouse.hcl:%d,", i+1)
		}
	}
	panic("no certificate block " + name)
}

// An expired certificate is served, as nginx serves it: -check passes
// with a warning at its block that says when, as a date and days.
func TestCheckWarnsExpiredCertificate(t *testing.T) {
	dir := workerReadableTempDir(t)
	expired := time.Now().Add(-40*24*time.Hour - time.Hour)
	c := writeCertUntil(t, dir, "old", false, expired, "old.test")
	if err := os.Chown(c.key, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	src := "route \"/\" {\n  respond {}\n}\nuser = \"nobody\"\n" + tlsListener("old", "old.pem", "old.key")
	if err := os.WriteFile(filepath.Join(dir, "gatehouse.hcl"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(gatehouseBin, "-config", "gatehouse.hcl", "-check")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("-check: %v\n%s", err, out)
	}
	want := ": warning: Expired certificate; listener \"old\": tls: certificate \"old\": the certificate in " +
		c.cert + " (CN=old.test) expired " + expired.UTC().Format(time.DateOnly) + " (40 days ago)"
	if !strings.Contains(string(out), "gatehouse: "+blockAt(src, "old")) || !strings.Contains(string(out), want) ||
		!strings.Contains(string(out), "configuration gatehouse.hcl is valid") {
		t.Errorf("-check output:\n%s\nwant a line at %s with %q", out, blockAt(src, "old"), want)
	}
}

// lastStatus returns the last datagram that holds a STATUS= line ("" if none).
func lastStatus(ms []string) string {
	for i := len(ms) - 1; i >= 0; i-- {
		if statusOf(ms[i]) != "" {
			return ms[i]
		}
	}
	return ""
}

// A static root that disappears at run time costs its own route a 404 (in
// the worker that holds it open) or a 503 (in a worker started after), never
// the worker: the other routes are served and no worker dies for it.
func TestStaticRootVanishes(t *testing.T) {
	dir := workerReadableTempDir(t)
	gone := filepath.Join(dir, "gone")
	if err := os.MkdirAll(gone, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(gone, "index.html"), []byte("soon gone\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h := start(t, fmt.Sprintf(`
workers {
  count = 1
}
route "/gone" {
  static {
    root = %q
  }
}
route "/ok" {
  respond {
    body = "ok\n"
  }
}
`, gone))
	cl := newClient(t, "127.0.0.2", h.addr)
	status := func(path string) int {
		t.Helper()
		resp, _, err := cl.get(path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		return resp.StatusCode
	}
	if got := status("/gone/index.html"); got != http.StatusOK {
		t.Fatalf("before: /gone/index.html %d", got)
	}
	if err := os.RemoveAll(gone); err != nil {
		t.Fatal(err)
	}
	// The running worker holds the deleted root open: its files are gone.
	if got := status("/gone/index.html"); got != http.StatusNotFound {
		t.Errorf("root deleted under a running worker: %d, want 404", got)
	}
	// A worker started now (the old one killed on purpose) finds no root.
	h.expectDeaths(1)
	old := h.snapshot().Workers[0]
	if err := syscall.Kill(old.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	h.waitFor("the replacement", 20*time.Second, func(s view.Snapshot) bool {
		w := s.Workers[0]
		return w.State == "ready" && w.PID != old.PID
	})
	cl = newClient(t, "127.0.0.3", h.addr)
	for i := 0; i < 10; i++ {
		if got := status("/gone/index.html"); got != http.StatusServiceUnavailable {
			t.Errorf("request %d to the vanished root: %d, want 503", i, got)
		}
		if got := status("/ok"); got != http.StatusOK {
			t.Errorf("request %d to another route: %d, want 200", i, got)
		}
	}
	if !strings.Contains(h.logs.String(), "document root unavailable") {
		t.Errorf("the worker did not log the missing root")
	}
}

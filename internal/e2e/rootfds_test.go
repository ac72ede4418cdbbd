package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Static roots under a directory only root can search (issue 30 item 9: a
// clone in /root): the supervisor opens each root while it can and hands it
// to the workers, whose account needs permission on the root itself only.

// privateRoot makes dir/private (mode 0700, root's) holding www (0755) with
// index.html, and returns www. The test's own directory is 0700 too.
func privateRoot(t *testing.T, dir, body string) string {
	t.Helper()
	private := filepath.Join(dir, "private")
	www := filepath.Join(private, "www")
	if err := os.MkdirAll(www, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(www, "index.html"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(private, 0o700); err != nil {
		t.Fatal(err)
	}
	return www
}

// A worker under the strict sandbox, spawned by the supervisor itself,
// serves a root whose parent it may not search: pivot_root and Landlock
// applied, no worker death (the harness checks).
func TestStaticRootUnderPrivateDirectory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the root's parent must be closed to the workers' account")
	}
	www := privateRoot(t, t.TempDir(), "<h1>private</h1>\n")
	h := start(t, `
sandbox {
  mode = "strict"
}
route "/" {
  static {
    root = "`+www+`"
  }
}
`)
	cl := newClient(t, "127.0.0.1", h.addr)
	for i := range 3 {
		resp, body, err := cl.get("/index.html")
		if err != nil || resp.StatusCode != 200 || body != "<h1>private</h1>\n" {
			t.Fatalf("request %d: %v %v %q\n%s", i, resp, err, body, h.logs.String())
		}
	}
	for _, w := range h.snapshot().Workers {
		for _, want := range []string{"+pivot_root", "+landlock", "+seccomp"} {
			if !slices.Contains(w.Sandbox, want) {
				t.Errorf("worker %d: no %q in its layers %v", w.Slot, want, w.Sandbox)
			}
		}
	}
}

// The gatehouse binary started as root (spawner, supervisor dropped to its
// own account) serves such a root, keeps serving it across a reload that
// replaces its workers (the supervisor can no longer open it: the directory
// opened at start is kept), and refuses a reload adding another root it
// cannot reach, naming its account, without touching the running workers.
func TestStaticRootUnderPrivateDirectoryAsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: gatehouse must start as root and drop privileges")
	}
	dir := writeConfig(t, "")
	www := privateRoot(t, t.TempDir(), "<h1>private</h1>\n")
	other := privateRoot(t, t.TempDir(), "<h1>other</h1>\n")
	conf := func(extra string) {
		src := `
listener "http" {
  address = "127.0.0.1:0"
}
route "/ok" {
  respond {
    body = "ok\n"
  }
}
route "/" {
  static {
    root = "` + www + `"
  }
}
` + extra
		if err := os.WriteFile(filepath.Join(dir, "gatehouse.hcl"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	conf("")
	p := startBinary(t, dir, 0, "-config", "gatehouse.hcl")
	p.waitServing(t, "/index.html")
	if code, body := opsGet(t, p.addr, "/index.html"); code != 200 || body != "<h1>private</h1>\n" {
		t.Fatalf("before reload: %d %q\n%s", code, body, p.log())
	}

	// A reload that replaces the workers (a route changed).
	conf("route \"/v\" {\n  respond {\n    body = \"two\\n\"\n  }\n}\n")
	p.cmd.Process.Signal(syscall.SIGHUP)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, body := opsGet(t, p.addr, "/v"); body == "two\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("reload not applied\n%s", p.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, body := opsGet(t, p.addr, "/index.html"); code != 200 || body != "<h1>private</h1>\n" {
		t.Fatalf("after reload: %d %q\n%s", code, body, p.log())
	}

	// A reload adding a root the supervisor's account cannot reach.
	conf("route \"/other/\" {\n  static {\n    root = \"" + other + "\"\n  }\n}\n")
	p.cmd.Process.Signal(syscall.SIGHUP)
	deadline = time.Now().Add(20 * time.Second)
	for !strings.Contains(p.log(), "reload failed") {
		if time.Now().After(deadline) {
			t.Fatalf("no failed reload logged\n%s", p.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
	log := p.log()
	for _, want := range []string{other, "cannot be opened by the supervisor's account", "nobody"} {
		if !strings.Contains(log, want) {
			t.Errorf("the failed reload's log lacks %q:\n%s", want, log)
		}
	}
	if code, body := opsGet(t, p.addr, "/v"); code != 200 || body != "two\n" {
		t.Errorf("after the failed reload /v: %d %q", code, body)
	}
	if code, body := opsGet(t, p.addr, "/index.html"); code != 200 || body != "<h1>private</h1>\n" {
		t.Errorf("after the failed reload: %d %q", code, body)
	}
}

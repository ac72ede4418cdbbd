package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gatehouse-dev/gatehouse/sandbox"
)

// readableTempDir is a temporary directory the workers' account can search:
// testing's own are mode 0700.
func readableTempDir(tb testing.TB) string {
	tb.Helper()
	dir := tb.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			tb.Fatal(err)
		}
	}
	return dir
}

// hostParse parses src as "file.hcl" in dir with the host checks.
func hostParse(dir, src string, handlers ...string) error {
	_, err := Parse([]byte(src), "file.hcl", ParseOptions{BaseDir: dir, Handlers: handlers})
	return err
}

// A document root the workers' account cannot read is refused, naming the
// key, file:line, the directory itself, its mode and the account; a root
// under a directory only the supervisor can search is accepted: the
// supervisor opens it and hands it to the workers.
func TestHostRootUnreadable(t *testing.T) {
	base := readableTempDir(t)
	private := filepath.Join(base, "private")
	www := filepath.Join(private, "www")
	if err := os.MkdirAll(www, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(private, 0o755); os.Chmod(www, 0o755) })
	src := minimal + "route \"/s\" {\n  static {\n    root = \"private/www\"\n  }\n}\n"
	if os.Geteuid() != 0 {
		// Another account loses search permission on its own directory
		// with mode 0: the supervisor could not open the root.
		if err := os.Chmod(private, 0); err != nil {
			t.Fatal(err)
		}
		err := hostParse(base, src)
		wantError(t, src, err, "file.hcl:10,12-", "Unreadable static root", `route "/s": static.root`,
			"cannot be opened by the supervisor's account", fmt.Sprintf("directory %q has mode 0000", private), "does not let it search")
		return
	}
	acct, err := sandbox.WorkerAccount("", "")
	if err != nil {
		t.Fatal(err)
	}
	// Root's directory above the root, closed to everyone else: accepted.
	if err := os.Chmod(private, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := hostParse(base, src); err != nil {
		t.Errorf("a root under a directory of mode 0700: %v", err)
	}
	// The root itself closed to the workers' account: refused.
	if err := os.Chmod(www, 0o700); err != nil {
		t.Fatal(err)
	}
	err = hostParse(base, src)
	wantError(t, src, err, "file.hcl:10,12-", "Unreadable static root", `route "/s": static.root`, acct.String(),
		fmt.Sprintf("directory %q has mode 0700, owner 0:0", www), "does not let it list and search")
	// A root the account can search but not list.
	if err := os.Chmod(www, 0o711); err != nil {
		t.Fatal(err)
	}
	err = hostParse(base, src)
	wantError(t, src, err, "Unreadable static root", fmt.Sprintf("directory %q has mode 0711", www), "does not let it list and search")
}

func TestHostEmbedded(t *testing.T) {
	base := readableTempDir(t)
	src := minimal + "route \"/app\" {\n  embedded {\n    name = \"nothing\"\n  }\n}\n"
	wantError(t, src, hostParse(base, src), "file.hcl:10,12-", "Unknown embedded handler", `embedded.name "nothing"`, "has no embedded handlers")
	wantError(t, src, hostParse(base, src, "app", "attack"), "has only app, attack")
	if err := hostParse(base, src, "nothing"); err != nil {
		t.Errorf("a handler the program has: %v", err)
	}
	// A worker re-parsing the file skips the check: it checks by itself.
	if _, err := Parse([]byte(src), "file.hcl", ParseOptions{BaseDir: base, SkipFSChecks: true}); err != nil {
		t.Errorf("with SkipFSChecks: %v", err)
	}
}

func TestHostChroot(t *testing.T) {
	base := readableTempDir(t)
	empty := filepath.Join(base, "empty")
	full := filepath.Join(base, "full")
	for _, d := range []string{empty, full} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(full, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		dir  string
		want string // "" accepted
	}{
		{"/nonexistent", `sandbox.chroot "/nonexistent": no such file or directory`},
		{"full", fmt.Sprintf("sandbox.chroot %q is not empty", full)},
		{"full/f", "is not a directory"},
		{"empty", ""},
	} {
		src := minimal + fmt.Sprintf("sandbox {\n  chroot = %q\n}\n", tt.dir)
		err := hostParse(base, src)
		if tt.want == "" {
			if err != nil {
				t.Errorf("chroot %q: %v", tt.dir, err)
			}
			continue
		}
		wantError(t, src, err, "file.hcl:9,12-", "Invalid chroot", tt.want)
	}
}

func TestHostUser(t *testing.T) {
	base := readableTempDir(t)
	src := minimal + "user = \"nosuchuser\"\n"
	wantError(t, src, hostParse(base, src), "file.hcl:8,8-", "Unknown user", `user "nosuchuser"`, "not found in /etc/passwd")
	if os.Geteuid() == 0 {
		src = minimal + "user = \"root\"\n"
		wantError(t, src, hostParse(base, src), "file.hcl:8,8-", "Invalid user", "privileged")
	}
	src = minimal + "user = \"nobody\"\n"
	if err := hostParse(base, src); err != nil {
		t.Errorf("user nobody: %v", err)
	}
}

// gatehouse creates no directory for the admin socket: a missing one is an
// error, and nothing is created.
func TestHostAdminSocketDir(t *testing.T) {
	base := readableTempDir(t)
	src := minimal + "admin {\n  socket = \"missing/sub/admin.sock\"\n}\n"
	wantError(t, src, hostParse(base, src), "file.hcl:9,12-", "Invalid admin socket",
		fmt.Sprintf("its directory %q: no such file or directory", filepath.Join(base, "missing/sub")), "does not create it")
	if _, err := os.Stat(filepath.Join(base, "missing")); !os.IsNotExist(err) {
		t.Errorf("the check created a directory: %v", err)
	}
	src = minimal + "admin {\n  socket = \"admin.sock\"\n}\n"
	if err := hostParse(base, src); err != nil {
		t.Errorf("a socket in an existing directory: %v", err)
	}
}

// The built-in configuration run from another directory than the source
// tree: its relative root does not exist there.
func TestDefaultElsewhere(t *testing.T) {
	dir := readableTempDir(t)
	t.Chdir(dir)
	_, err := Default()
	if err == nil {
		t.Fatal("Default() from another directory succeeded")
	}
	want := fmt.Sprintf(`default.hcl:10,12-26: Invalid static root; route "/": static.root %q: no such file or directory.`, filepath.Join(dir, "examples/www"))
	if !strings.Contains(err.Error(), want) {
		t.Errorf("Default() error:\n%v\nwant %q", err, want)
	}
}

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

// A document root the workers' account cannot reach is refused, naming the
// key, file:line, the directory that stops it, its mode and the account.
func TestHostRootUnreadable(t *testing.T) {
	base := readableTempDir(t)
	private := filepath.Join(base, "private")
	www := filepath.Join(private, "www")
	if err := os.MkdirAll(www, 0o755); err != nil {
		t.Fatal(err)
	}
	// Root reads everything through access(2), so only the mode bits as
	// the workers' account see them can refuse; others lose search
	// permission on their own directory with mode 0.
	mode := os.FileMode(0o700)
	if os.Geteuid() != 0 {
		mode = 0
	}
	if err := os.Chmod(private, mode); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(private, 0o755) })
	src := minimal + "route \"/s\" {\n  static {\n    root = \"private/www\"\n  }\n}\n"
	err := hostParse(base, src)
	wantError(t, src, err, "file.hcl:10,12-", "Unreadable static root", `route "/s": static.root`,
		fmt.Sprintf("directory %q has mode %04o", private, mode), "does not let it search")
	if os.Geteuid() == 0 {
		acct, aerr := sandbox.WorkerAccount("", "")
		if aerr != nil {
			t.Fatal(aerr)
		}
		wantError(t, src, err, acct.String())
	}
	// The same tree, searchable: accepted.
	if err := os.Chmod(private, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := hostParse(base, src); err != nil {
		t.Errorf("a searchable root: %v", err)
	}
	// A root the account can search but not list.
	if err := os.Chmod(www, 0o711); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		err = hostParse(base, src)
		wantError(t, src, err, "Unreadable static root", fmt.Sprintf("directory %q has mode 0711", www), "does not let it list and search")
	}
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

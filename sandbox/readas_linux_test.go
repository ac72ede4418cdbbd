package sandbox

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// ReadFileAs reads as the account: a root-only file is refused to nobody
// and read once nobody owns it; no thread of the process is left with
// nobody's ids, even after reads from many goroutines at once.
func TestReadFileAs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to read as another account")
	}
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "a.key")
	if err := os.WriteFile(path, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	nobody := &Account{Name: "nobody", UID: nobodyID, GID: nobodyID}
	if _, err := ReadFileAs(nobody, path); !errors.Is(err, fs.ErrPermission) {
		t.Fatalf("a root-only file read as nobody: %v, want permission denied", err)
	}
	if b, err := ReadFileAs(nil, path); err != nil || string(b) != "secret" {
		t.Fatalf("read as the caller: %q %v", b, err)
	}
	if err := os.Chown(path, nobodyID, nobodyID); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Go(func() {
			if b, err := ReadFileAs(nobody, path); err != nil || string(b) != "secret" {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("read as nobody, who owns it: %v", err)
	}
	if os.Geteuid() != 0 || os.Getegid() != 0 {
		t.Errorf("the process's ids changed: %d:%d", os.Geteuid(), os.Getegid())
	}
	// A reading thread ends just after its goroutine answered.
	var left []string
	for i := 0; i < 250; i++ {
		if left = nonRootThreads(t); len(left) == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("threads left with another uid after 5 s: %q", left)
}

// nonRootThreads returns the Uid lines of the process's threads whose
// effective uid is not 0.
func nonRootThreads(t *testing.T) []string {
	tasks, err := filepath.Glob("/proc/self/task/*/status")
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, task := range tasks {
		b, err := os.ReadFile(task)
		if err != nil {
			continue // the thread ended meanwhile
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "Uid:") && strings.Fields(line)[2] != "0" {
				left = append(left, task+": "+line)
			}
		}
	}
	return left
}

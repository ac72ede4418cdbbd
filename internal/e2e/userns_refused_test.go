package e2e

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"golang.org/x/sys/unix"
)

// Issue 16 item 2: started unprivileged where the kernel refuses it user
// namespaces, gatehouse refuses to start in every sandbox mode rather than
// run a worker under its own uid, which could signal or trace it.

// usernsRefusedArg re-executes the test binary as usernsRefused.
const usernsRefusedArg = "userns-refused"

// refusedUID is the unprivileged account the wrapper drops to.
const refusedUID = 65534

// usernsRefused is the test binary re-executed as a wrapper, started as
// root: it drops to refusedUID, installs a seccomp filter under which the
// kernel refuses a new user namespace to it and every descendant (clone and
// unshare with CLONE_NEWUSER fail with EPERM, clone3, whose flags a filter
// cannot read, with ENOSYS), checks that it does, and execs args.
func usernsRefused(args []string) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "userns-refused: "+format+"\n", a...)
		return 97
	}
	if len(args) == 0 {
		return fail("no command")
	}
	if err := syscall.Setgroups(nil); err != nil {
		return fail("setgroups: %v", err)
	}
	if err := syscall.Setresgid(refusedUID, refusedUID, refusedUID); err != nil {
		return fail("setresgid: %v", err)
	}
	if err := syscall.Setresuid(refusedUID, refusedUID, refusedUID); err != nil {
		return fail("setresuid: %v", err)
	}
	newUser := []seccomp.Condition{{Argument: 0, Operation: seccomp.BitsSet, Value: unix.CLONE_NEWUSER}}
	filter := seccomp.Filter{
		NoNewPrivs: true,
		Flag:       seccomp.FilterFlagTSync,
		Policy: seccomp.Policy{
			DefaultAction: seccomp.ActionAllow,
			Syscalls: []seccomp.SyscallGroup{
				{Action: seccomp.ActionErrno, NamesWithCondtions: []seccomp.NameWithConditions{
					{Name: "clone", Conditions: newUser},
					{Name: "unshare", Conditions: newUser},
				}},
				{Action: seccomp.ActionErrno | seccomp.Action(unix.ENOSYS), Names: []string{"clone3"}},
			},
		},
	}
	if err := seccomp.LoadFilter(filter); err != nil {
		return fail("loading filter: %v", err)
	}
	// The refusal is the kernel's: a child in a new user namespace is
	// refused, a plain child is not (it fails only to exec a missing file).
	missing := filepath.Join(os.TempDir(), "gatehouse-userns-refused-missing")
	_, err := syscall.ForkExec(missing, []string{missing}, &syscall.ProcAttr{Sys: &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER}})
	if !errors.Is(err, syscall.EPERM) {
		return fail("a child in a new user namespace: %v, want EPERM", err)
	}
	if _, err := syscall.ForkExec(missing, []string{missing}, &syscall.ProcAttr{}); !errors.Is(err, syscall.ENOENT) {
		return fail("a plain child: %v, want ENOENT", err)
	}
	if os.Getuid() != refusedUID || os.Geteuid() != refusedUID {
		return fail("uid %d euid %d, want %d", os.Getuid(), os.Geteuid(), refusedUID)
	}
	return fail("exec %s: %v", args[0], syscall.Exec(args[0], args, os.Environ()))
}

func TestUnprivilegedWithoutUserNamespaces(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the wrapper drops from root to an unprivileged account")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"best-effort", "strict"} {
		t.Run(mode, func(t *testing.T) {
			dir := writeConfig(t, fmt.Sprintf(`
sandbox {
  mode = %q
}
admin {
  socket = "run/admin.sock"
}
`, mode))
			// The account must be able to run the binary and create the
			// admin socket.
			run := filepath.Join(dir, "run")
			if err := os.Mkdir(run, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(run, refusedUID, refusedUID); err != nil {
				t.Fatal(err)
			}
			bin := filepath.Join(dir, "gatehouse")
			copyExecutable(t, gatehouseBin, bin)

			p := startOps(t, dir, opsOptions{bin: self, args: []string{usernsRefusedArg, bin, "-config", "gatehouse.hcl"}, noWait: true})
			pid := p.cmd.Process.Pid
			// Watch the process's children until it exits (or, should it
			// start, until its workers are seen): a worker is the binary
			// re-executed with "worker"; the supervisor's namespace probes
			// are not.
			workers := map[int]string{} // pid -> uid
			exited := false
			for i := 0; i < 2000 && !exited; i++ {
				select {
				case <-p.exited:
					exited = true
				default:
				}
				for _, c := range childPIDs(pid) {
					cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", c))
					status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c))
					if err != nil || !strings.Contains(string(cmdline), "\x00worker\x00") {
						continue
					}
					for _, line := range strings.Split(string(status), "\n") {
						if v, ok := strings.CutPrefix(line, "Uid:"); ok {
							workers[c] = strings.Join(strings.Fields(v), " ")
						}
					}
				}
				if len(workers) > 0 && listeningRE.MatchString(p.log()) {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			shared := fmt.Sprintf("%d %d %d %d", refusedUID, refusedUID, refusedUID, refusedUID)
			for w, uid := range workers {
				if uid == shared {
					t.Errorf("worker %d runs as the supervisor's uid (Uid: %s)", w, uid)
				} else {
					t.Errorf("worker %d started (Uid: %s)", w, uid)
				}
			}
			if !exited {
				t.Fatalf("gatehouse started without user namespaces\n%s", p.log())
			}
			// A startup failure other than a bind is run.ExitError.
			if code := p.waitExit(t, time.Second); code != 1 {
				t.Errorf("exit status %d, want 1\n%s", code, p.log())
			}
			log := p.log()
			if strings.Contains(log, "userns-refused:") {
				t.Fatalf("the wrapper failed:\n%s", log)
			}
			want := []string{"started unprivileged without user and pid namespaces: a worker would run as the supervisor's uid"}
			if mode == "strict" {
				want = []string{"sandbox: strict mode: layers not applied", "namespace/user (kernel refused it: operation not permitted)"}
			}
			for _, w := range want {
				if !strings.Contains(log, w) {
					t.Errorf("log lacks %q:\n%s", w, log)
				}
			}
			if listeningRE.MatchString(log) {
				t.Errorf("gatehouse listened before refusing:\n%s", log)
			}
		})
	}
}

// copyExecutable copies the binary src to dst, executable by anyone.
func copyExecutable(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
}

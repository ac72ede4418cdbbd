package e2e

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/sandbox"
)

// The supervisor's privileges read from /proc for each way it can be
// started (issue 16 item 1): it is never root after binding and holds no
// capability, and its workers never share its uid when it started as root.

// procStatusFields reads Uid, Gid, CapEff, CapBnd and NoNewPrivs of pid.
func procStatusFields(t *testing.T, pid int) map[string]string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("status of %d: %v", pid, err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = strings.Join(strings.Fields(v), " ")
		}
	}
	return m
}

func wantFields(t *testing.T, who string, got map[string]string, want map[string]string) {
	t.Helper()
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s %s = %q, want %q", who, k, got[k], w)
		}
	}
}

func uidOf(fields map[string]string) string { return strings.Fields(fields["Uid"] + " ?")[0] }

func TestSupervisorPrivileges(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the three ways to start are checked as root")
	}
	noCaps := map[string]string{"CapEff": "0000000000000000", "CapPrm": "0000000000000000", "CapBnd": "0000000000000000", "CapAmb": "0000000000000000", "NoNewPrivs": "1"}
	// checkWorkers reads every worker: no capability, and a uid that is
	// not the supervisor's (unless shared is set) and never 0.
	checkWorkers := func(t *testing.T, p *proc, supUID string, shared bool) {
		t.Helper()
		// A worker is checked once its sandbox is in force (seccomp is
		// its last layer); one serving does not mean every one is.
		var workers []int
		for i := 0; i < 400; i++ {
			workers = p.workerPIDs(t)
			sealed := 0
			for _, w := range workers {
				if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", w)); err == nil && strings.Contains(string(b), "Seccomp:\t2") {
					sealed++
				}
			}
			if len(workers) == 4 && sealed == 4 {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if len(workers) != 4 {
			t.Fatalf("%d worker processes found, want 4", len(workers))
		}
		for _, w := range workers {
			st := procStatusFields(t, w)
			wantFields(t, fmt.Sprintf("worker %d", w), st, map[string]string{"CapEff": "0000000000000000", "NoNewPrivs": "1"})
			switch uid := uidOf(st); {
			case uid == "0":
				t.Errorf("worker %d runs as root", w)
			case !shared && uid == supUID:
				t.Errorf("worker %d shares the supervisor's uid %s", w, uid)
			case shared && uid != supUID:
				t.Errorf("worker %d uid %s, want the supervisor's %s (started unprivileged)", w, uid, supUID)
			}
		}
	}

	t.Run("root-without-user", func(t *testing.T) {
		sup, fallback, err := sandbox.SupervisorAccount("")
		if err != nil {
			t.Fatal(err)
		}
		dir := writeConfig(t, "")
		p := startBinary(t, dir, 0, "-config", "gatehouse.hcl")
		p.waitServing(t, "/ok")
		st := procStatusFields(t, p.cmd.Process.Pid)
		ids := fmt.Sprintf("%d %d %d %d", sup.UID, sup.UID, sup.UID, sup.UID)
		wantFields(t, "supervisor", st, noCaps)
		wantFields(t, "supervisor", st, map[string]string{"Uid": ids})
		if fallback && !strings.Contains(p.log(), "the supervisor runs as nobody") {
			t.Errorf("no loud line for the fall back to nobody:\n%s", p.log())
		}
		sp := p.spawnerPID()
		if sp == 0 {
			t.Fatal("no spawner")
		}
		spst := procStatusFields(t, sp)
		wantFields(t, "spawner", spst, map[string]string{"CapEff": "0000000000000000", "NoNewPrivs": "1"})
		if uidOf(spst) == uidOf(st) || uidOf(spst) == "0" {
			t.Errorf("spawner uid %s, supervisor %s: want the workers' account", uidOf(spst), uidOf(st))
		}
		checkWorkers(t, p, uidOf(st), false)
	})

	t.Run("root-with-user", func(t *testing.T) {
		dir := writeConfig(t, `
user        = "nobody"
worker_user = "65532:65532"
admin {
  socket = "admin.sock"
}
`)
		p := startBinary(t, dir, 0, "-config", "gatehouse.hcl")
		p.waitServing(t, "/ok")
		st := procStatusFields(t, p.cmd.Process.Pid)
		wantFields(t, "supervisor", st, noCaps)
		wantFields(t, "supervisor", st, map[string]string{"Uid": "65534 65534 65534 65534", "Gid": "65534 65534 65534 65534"})
		checkWorkers(t, p, "65534", false)
		for _, w := range p.workerPIDs(t) {
			if uid := uidOf(procStatusFields(t, w)); uid != "65532" {
				t.Errorf("worker %d uid %s, want worker_user 65532", w, uid)
			}
		}
		// gatehousectl status shows the same, read by the supervisor.
		r := ctl(t, nil, ctlBin(t), "-socket", filepath.Join(dir, "admin.sock"), "status")
		if r.code != 0 {
			t.Fatalf("status: exit %d: %s", r.code, r.stderr)
		}
		for _, want := range []string{"euid 65534", "capabilities none (effective 0000000000000000, bounding 0000000000000000)", "no_new_privs true", "workers run as 65532:65532"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("gatehousectl status lacks %q:\n%s", want, r.stdout)
			}
		}
	})

	t.Run("non-root", func(t *testing.T) {
		dir := writeConfig(t, "")
		// The account must be able to run the binary.
		bin := filepath.Join(dir, "gatehouse")
		src, err := os.Open(gatehouseBin)
		if err != nil {
			t.Fatal(err)
		}
		dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
		if err == nil {
			_, err = io.Copy(dst, src)
			dst.Close()
		}
		src.Close()
		if err != nil {
			t.Fatal(err)
		}
		const uid = 65531
		p := startOps(t, dir, opsOptions{bin: bin, args: []string{"-config", "gatehouse.hcl"}, cred: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}})
		p.waitServing(t, "/ok")
		st := procStatusFields(t, p.cmd.Process.Pid)
		wantFields(t, "supervisor", st, map[string]string{"CapEff": "0000000000000000", "NoNewPrivs": "1", "Uid": strings.Repeat(strconv.Itoa(uid)+" ", 3) + strconv.Itoa(uid)})
		if !strings.Contains(p.log(), "started unprivileged") {
			t.Errorf("no warning that workers share the supervisor's uid:\n%s", p.log())
		}
		checkWorkers(t, p, strconv.Itoa(uid), true)
		// Sharing its uid, a worker is kept from it by its namespaces.
		for _, w := range p.workerPIDs(t) {
			for _, ns := range []string{"user", "pid"} {
				mine, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", p.cmd.Process.Pid, ns))
				theirs, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", w, ns))
				if mine == theirs {
					t.Errorf("worker %d shares the supervisor's %s namespace", w, ns)
				}
			}
		}
	})
}

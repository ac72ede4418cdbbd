package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/sandbox"
	"github.com/gatehouse-dev/gatehouse/supervisor/adminapi"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// startAdmin runs the gatehouse binary with an admin socket in its directory
// and waits until every worker is ready; it returns the process, the socket's
// path and the directory.
func startAdmin(t *testing.T, body string) (*proc, string, string) {
	t.Helper()
	dir := workerReadableTempDir(t)
	// In a directory of the account gatehouse drops to (as systemd's
	// RuntimeDirectory= makes it), which can then remove its socket.
	sock := filepath.Join(dir, "run", "admin.sock")
	if err := os.Mkdir(filepath.Dir(sock), 0o755); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		sup, _, err := sandbox.SupervisorAccount("")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(filepath.Dir(sock), sup.UID, sup.GID); err != nil {
			t.Fatal(err)
		}
	}
	writeOpsFile(t, dir, "127.0.0.1:0", "one\n", body+fmt.Sprintf("admin {\n  socket = %q\n}\n", sock))
	p := startOps(t, dir, opsOptions{args: []string{"-config", "gatehouse.hcl"}})
	p.waitServing(t, "/ok")
	deadline := time.Now().Add(20 * time.Second)
	for {
		st := ctlJSON(t, sock, "status").Status
		ready := 0
		for _, w := range st.Workers {
			if w.State == "ready" {
				ready++
			}
		}
		if ready == len(st.Workers) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("workers not ready within 20s: %+v", st.Workers)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return p, sock, dir
}

// gatehousectl status, workers, conns, clients, metrics and log-level
// against a running gatehouse, in tables and in JSON.
func TestOpsAdminCommands(t *testing.T) {
	p, sock, _ := startAdmin(t, "workers {\n  count = 2\n}\n")
	bin := ctlBin(t)

	fi, err := os.Lstat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Errorf("admin socket %v, want a socket with mode 0600", fi.Mode())
	}

	// status, as a table: every worker with its pid and sandbox layers.
	st := ctlJSON(t, sock, "status").Status
	if st == nil || len(st.Workers) != 2 {
		t.Fatalf("status: %+v", st)
	}
	r := ctl(t, nil, bin, "-socket", sock, "status")
	if r.code != 0 {
		t.Fatalf("status: exit %d: %s", r.code, r.stderr)
	}
	t.Logf("gatehousectl status:\n%s", r.stdout)
	for _, want := range []string{"SLOT", "PID", "SANDBOX", p.addr, "gatehouse.hcl", "+seccomp", "+landlock", "+namespace/user", "+pivot_root"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status table lacks %q", want)
		}
	}
	for _, w := range st.Workers {
		if w.PID <= 0 || w.State != "ready" || len(w.Sandbox) == 0 {
			t.Errorf("worker %+v", w)
		}
		if !strings.Contains(r.stdout, fmt.Sprint(w.PID)) {
			t.Errorf("status table lacks worker pid %d", w.PID)
		}
		for _, l := range w.Sandbox {
			if !strings.HasPrefix(l, "+") {
				t.Errorf("worker %d: sandbox layer %s not applied", w.Slot, l)
			}
		}
	}
	if st.Version != "dev" || !strings.HasSuffix(st.ConfigFile, "gatehouse.hcl") || len(st.Listeners) != 1 || st.Listeners[0] != p.addr ||
		st.Pool != 32 || st.Share != 8 || st.PID != p.cmd.Process.Pid || st.UptimeSeconds <= 0 {
		t.Errorf("status: %+v", st)
	}

	// -json always has its list, empty before any client connected; a
	// negative count is an argument.
	for _, args := range [][]string{{"clients"}, {"clients", "-5"}} {
		r := ctl(t, nil, bin, append([]string{"-socket", sock, "-json"}, args...)...)
		if r.code != 0 || !regexp.MustCompile(`"clients": \[\]`).MatchString(r.stdout) {
			t.Errorf("%v -json with no clients: exit %d, %s%s", args, r.code, r.stdout, r.stderr)
		}
	}

	// Flags after the command.
	if r := ctl(t, nil, bin, "workers", "-socket", sock, "-json"); r.code != 0 || !json.Valid([]byte(r.stdout)) {
		t.Errorf("workers with flags after the command: exit %d, %s%s", r.code, r.stdout, r.stderr)
	}

	// A kept-alive idle connection from 127.0.0.7, and a fresh one from 127.0.0.8.
	idle := newClient(t, "127.0.0.7", p.addr)
	if resp, _, err := idle.get("/ok"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /ok: %v", err)
	}
	fresh := dialFrom(t, "127.0.0.8", p.addr)
	defer fresh.Close()
	var conns *adminapi.Conns
	deadline := time.Now().Add(5 * time.Second)
	for {
		conns = ctlJSON(t, sock, "conns").Conns
		if conns.ByState["idle"] >= 1 && conns.ByState["fresh"] >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("conns: %+v", conns)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if conns.Total < 2 || conns.Pool != 32 {
		t.Errorf("conns: %+v", conns)
	}
	r = ctl(t, nil, bin, "-socket", sock, "conns")
	if r.code != 0 || !strings.Contains(r.stdout, "idle") || !strings.Contains(r.stdout, "at_worker") {
		t.Errorf("conns table: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	t.Logf("gatehousectl conns:\n%s", r.stdout)

	clients := ctlJSON(t, sock, "clients").Clients
	keys := map[string]adminapi.Client{}
	for _, c := range clients {
		keys[c.Key] = c
	}
	if keys["127.0.0.7"].Conns != 1 || keys["127.0.0.8"].Conns != 1 {
		t.Errorf("clients: %+v", clients)
	}
	if top := ctlJSON(t, sock, "clients", "1").Clients; len(top) != 1 {
		t.Errorf("clients 1: %+v", top)
	}
	r = ctl(t, nil, bin, "-socket", sock, "clients")
	if r.code != 0 || !strings.Contains(r.stdout, "127.0.0.7") || !strings.Contains(r.stdout, "CLIENT") {
		t.Errorf("clients table: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// metrics: the Prometheus text format.
	r = ctl(t, nil, bin, "-socket", sock, "metrics")
	if r.code != 0 {
		t.Fatalf("metrics: exit %d: %s", r.code, r.stderr)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(r.stdout))
	if err != nil {
		t.Fatalf("metrics do not parse: %v\n%s", err, r.stdout)
	}
	for _, name := range []string{
		"gatehouse_connections_accepted_total", "gatehouse_connections_refused_total", "gatehouse_connections",
		"gatehouse_dispatches_total", "gatehouse_share_waits_total", "gatehouse_timeouts_total",
		"gatehouse_worker_restarts_total", "gatehouse_worker_in_flight", "gatehouse_responses_total",
		"gatehouse_request_duration_seconds", "gatehouse_rounds_total",
	} {
		if fams[name] == nil {
			t.Errorf("metrics lack %s", name)
		}
	}
	if v := fams["gatehouse_connections_accepted_total"].GetMetric()[0].GetCounter().GetValue(); v < 2 {
		t.Errorf("gatehouse_connections_accepted_total = %v, want ≥ 2", v)
	}
	if h := fams["gatehouse_request_duration_seconds"]; h.GetType() != dto.MetricType_HISTOGRAM || h.GetMetric()[0].GetHistogram().GetSampleCount() < 1 {
		t.Errorf("latency histogram: %v", h)
	}
	// -json carries the same text.
	if m := ctlJSON(t, sock, "metrics").Metrics; !strings.Contains(m, "# TYPE gatehouse_request_duration_seconds histogram") {
		t.Errorf("metrics -json: %.200q", m)
	}

	// log-level.
	r = ctl(t, nil, bin, "-socket", sock, "log-level", "debug")
	if r.code != 0 || !strings.Contains(r.stdout, "debug") {
		t.Errorf("log-level debug: exit %d, %s%s", r.code, r.stdout, r.stderr)
	}
	ctlJSON(t, sock, "status")
	if !strings.Contains(p.log(), "[DEBUG]") {
		t.Errorf("no debug lines after log-level debug")
	}
	r = ctl(t, nil, bin, "-socket", sock, "log-level", "loud")
	if r.code != 1 || !strings.Contains(r.stderr, "unknown log level") {
		t.Errorf("log-level loud: exit %d, %s", r.code, r.stderr)
	}
	ctl(t, nil, bin, "-socket", sock, "log-level", "info")

	// Errors of gatehousectl itself.
	if r := ctl(t, nil, bin, "-socket", filepath.Join(t.TempDir(), "none.sock"), "status"); r.code != 3 || !strings.Contains(r.stderr, "cannot reach") {
		t.Errorf("missing socket: exit %d, %s", r.code, r.stderr)
	}
	if r := ctl(t, nil, bin, "-socket", sock); r.code != 2 || !strings.Contains(r.stderr, "usage") {
		t.Errorf("no command: exit %d, %s", r.code, r.stderr)
	}
	if r := ctl(t, nil, bin, "-socket", sock, "-json", "reboot"); r.code != 1 || !json.Valid([]byte(r.stdout)) {
		t.Errorf("unknown command: exit %d, %s%s", r.code, r.stdout, r.stderr)
	}
}

// reload with a changed file changes a route's body; a broken file is
// refused and the old configuration keeps serving; drain ends gatehouse with
// status 0 and removes the socket.
func TestOpsAdminReloadAndDrain(t *testing.T) {
	p, sock, dir := startAdmin(t, "")
	bin := ctlBin(t)
	adminBlock := fmt.Sprintf("admin {\n  socket = %q\n}\n", sock)

	writeOpsFile(t, dir, "127.0.0.1:0", "two\n", adminBlock)
	r := ctl(t, nil, bin, "-socket", sock, "reload")
	if r.code != 0 || !strings.Contains(r.stdout, "reloaded") {
		t.Fatalf("reload: exit %d, %s%s", r.code, r.stdout, r.stderr)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, body := opsGet(t, p.addr, "/v"); body == "two\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("route body did not change after reload")
		}
		time.Sleep(50 * time.Millisecond)
	}

	os.WriteFile(filepath.Join(dir, "gatehouse.hcl"), []byte("listener \"http\" {\n  adress = \"x\"\n}\n"+adminBlock), 0o644)
	r = ctl(t, nil, bin, "-socket", sock, "reload")
	if r.code != 1 || !strings.Contains(r.stderr, "reload failed") || !strings.Contains(r.stderr, "gatehouse.hcl:2") {
		t.Errorf("reload of a broken file: exit %d, %s", r.code, r.stderr)
	}
	if code, body := opsGet(t, p.addr, "/v"); code != 200 || body != "two\n" {
		t.Errorf("after a refused reload: %d %q", code, body)
	}

	// drain says what it does.
	r = ctl(t, nil, bin, "-socket", sock, "drain")
	if r.code != 0 || !strings.Contains(r.stdout, "draining") || !strings.Contains(r.stdout, "shutdown_grace (10s)") || !strings.Contains(r.stdout, "then are cut") {
		t.Errorf("drain: exit %d, %s%s", r.code, r.stdout, r.stderr)
	}
	if code := p.waitExit(t, 20*time.Second); code != 0 {
		t.Errorf("exit status %d after drain, want 0", code)
	}
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("admin socket left behind: %v", err)
	}
}

// Malformed, oversized and unknown requests get error replies; gatehouse
// keeps serving.
func TestOpsAdminBadRequests(t *testing.T) {
	p, sock, _ := startAdmin(t, "workers {\n  count = 1\n}\n")
	send := func(payload string) (adminapi.Reply, *bufio.Reader, net.Conn) {
		t.Helper()
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, payload); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		line, err := br.ReadBytes('\n')
		if err != nil {
			t.Fatalf("no reply to %.40q: %v", payload, err)
		}
		var r adminapi.Reply
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("reply %q: %v", line, err)
		}
		return r, br, c
	}
	for _, tt := range []struct{ name, payload, want string }{
		{"not JSON", "hello there\n", "malformed request"},
		{"oversized", `{"command":"status","args":["` + strings.Repeat("a", 8<<10) + `"]}` + "\n", "longer than 4096 bytes"},
		{"binary", "\x00\xff\xfe{\n", "malformed request"},
	} {
		r, br, _ := send(tt.payload)
		if r.OK || !strings.Contains(r.Error, tt.want) {
			t.Errorf("%s: reply %+v, want an error containing %q", tt.name, r, tt.want)
		}
		if _, err := br.ReadByte(); err == nil {
			t.Errorf("%s: connection left open", tt.name)
		}
	}
	r, br, c := send(`{"command":"shutdown-now"}` + "\n")
	if r.OK || !strings.Contains(r.Error, "unknown command") {
		t.Errorf("unknown command: %+v", r)
	}
	// The connection stays usable after a well-formed unknown command.
	io.WriteString(c, `{"command":"status"}`+"\n")
	line, err := br.ReadBytes('\n')
	if err != nil || !json.Valid(line) || !strings.Contains(string(line), `"ok":true`) {
		t.Errorf("status after an unknown command: %v %q", err, line)
	}
	if code, _ := opsGet(t, p.addr, "/ok"); code != 200 {
		t.Errorf("GET /ok after bad admin requests: %d", code)
	}
	if st := ctlJSON(t, sock, "status").Status; st == nil || len(st.Workers) != 1 {
		t.Errorf("status after bad admin requests: %+v", st)
	}
	select {
	case <-p.exited:
		t.Fatalf("gatehouse exited: %v", p.err)
	default:
	}
}

// A peer that is neither root nor gatehouse's user is refused by its
// SO_PEERCRED uid. The socket is 0600, so such a peer cannot even connect
// through the file; to show the credential check itself, this test (and only
// this test) widens the file's mode to 0666 and connects as uid 65534.
func TestOpsAdminRefusesOtherUID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a client as another uid")
	}
	p, sock, dir := startAdmin(t, "workers {\n  count = 1\n}\n")
	// A copy of gatehousectl that uid 65534 can execute.
	bin := filepath.Join(dir, "gatehousectl")
	src, err := os.ReadFile(ctlBin(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, src, 0o755); err != nil {
		t.Fatal(err)
	}
	nobody := &syscall.Credential{Uid: 65534, Gid: 65534}

	// With the product's 0600 mode the file refuses first.
	r := ctl(t, nobody, bin, "-socket", sock, "status")
	if r.code != 3 || !strings.Contains(r.stderr, "permission denied") {
		t.Errorf("uid 65534 through a 0600 socket: exit %d, %s", r.code, r.stderr)
	}

	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	r = ctl(t, nobody, bin, "-socket", sock, "status")
	if r.code != 1 || !strings.Contains(r.stderr, "permission denied: uid 65534") || strings.Contains(r.stdout, "SLOT") {
		t.Errorf("uid 65534 connected: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = ctl(t, nobody, bin, "-socket", sock, "drain")
	if r.code != 1 {
		t.Errorf("uid 65534 drain: exit %d, %s", r.code, r.stderr)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(p.log(), "admin connection refused") {
		if time.Now().After(deadline) {
			t.Fatal("refusal not logged")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Root still gets through, and gatehouse did not drain.
	if st := ctlJSON(t, sock, "status").Status; st == nil || st.Stopping {
		t.Errorf("status as root after the refusals: %+v", st)
	}
	if code, _ := opsGet(t, p.addr, "/ok"); code != 200 {
		t.Errorf("GET /ok: %d", code)
	}
}

// Started as root with its admin socket in a directory only root may write,
// gatehouse cannot remove the socket once it dropped privileges: it says so
// at exit, gatehousectl then says gatehouse is not running, and the next
// start replaces the file.
func TestOpsAdminSocketInRootDirectory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: gatehouse drops privileges only when started as root")
	}
	dir := workerReadableTempDir(t)
	sock := filepath.Join(dir, "run", "admin.sock")
	if err := os.Mkdir(filepath.Dir(sock), 0o755); err != nil {
		t.Fatal(err)
	}
	writeOpsFile(t, dir, "127.0.0.1:0", "one\n", fmt.Sprintf("admin {\n  socket = %q\n}\n", sock))
	bin := ctlBin(t)
	for run := 1; run <= 2; run++ {
		p := startOps(t, dir, opsOptions{args: []string{"-config", "gatehouse.hcl"}})
		p.waitServing(t, "/ok")
		if r := ctl(t, nil, bin, "-socket", sock, "status"); r.code != 0 {
			t.Fatalf("start %d: status: exit %d, %s", run, r.code, r.stderr)
		}
		p.cmd.Process.Signal(syscall.SIGTERM)
		if code := p.waitExit(t, 20*time.Second); code != 0 {
			t.Fatalf("start %d: exit status %d", run, code)
		}
		if fi, err := os.Lstat(sock); err != nil || fi.Mode().Type() != os.ModeSocket {
			t.Fatalf("start %d: after exit the socket is %v (%v); this test expects it left in a root-owned directory", run, fi, err)
		}
		if !strings.Contains(p.log(), "admin socket file left behind; the next start replaces it") {
			t.Errorf("start %d: no line about the socket left:\n%s", run, p.log())
		}
		if r := ctl(t, nil, bin, "-socket", sock, "status"); r.code != 3 || !strings.Contains(r.stderr, "gatehouse is not running") {
			t.Errorf("start %d: status after exit: exit %d, %s", run, r.code, r.stderr)
		}
	}
}

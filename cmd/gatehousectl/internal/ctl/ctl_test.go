package ctl

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/version"
	"github.com/gatehouse-dev/gatehouse/supervisor/adminapi"
)

// fakeAdmin answers each connection's one request with reply and records
// the requests.
func fakeAdmin(t *testing.T, reply adminapi.Reply) (string, chan adminapi.Request) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "admin.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	reqs := make(chan adminapi.Request, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			line, _ := bufio.NewReader(c).ReadBytes('\n')
			var req adminapi.Request
			json.Unmarshal(line, &req)
			reqs <- req
			b, _ := json.Marshal(reply)
			c.Write(append(b, '\n'))
			c.Close()
		}
	}()
	return path, reqs
}

func run(args []string, env map[string]string) (string, string, int) {
	var out, errb bytes.Buffer
	code := Run(args, &out, &errb, func(k string) string { return env[k] })
	return out.String(), errb.String(), code
}

func TestFlagsAnywhere(t *testing.T) {
	sock, reqs := fakeAdmin(t, adminapi.Reply{OK: true, Message: "log level set to debug"})
	tests := []struct {
		args    []string
		env     map[string]string
		cmd     string
		cmdArgs []string
		json    bool
	}{
		{[]string{"-socket", sock, "log-level", "debug"}, nil, "log-level", []string{"debug"}, false},
		{[]string{"log-level", "-socket", sock, "debug", "-json"}, nil, "log-level", []string{"debug"}, true},
		{[]string{"-json", "clients", "5", "--socket=" + sock}, nil, "clients", []string{"5"}, true},
		{[]string{"-socket", sock, "clients", "-5"}, nil, "clients", []string{"5"}, false},
		{[]string{"clients", "-12", "-socket", sock, "-json"}, nil, "clients", []string{"12"}, true},
		{[]string{"-socket", sock, "log-level", "-1"}, nil, "log-level", []string{"-1"}, false},
		{[]string{"status"}, map[string]string{SocketEnv: sock}, "status", nil, false},
	}
	for _, tt := range tests {
		out, errs, code := run(tt.args, tt.env)
		if code != ExitOK {
			t.Errorf("%v: exit %d: %s", tt.args, code, errs)
			continue
		}
		req := <-reqs
		if req.Command != tt.cmd || strings.Join(req.Args, " ") != strings.Join(tt.cmdArgs, " ") {
			t.Errorf("%v: sent %+v, want %s %v", tt.args, req, tt.cmd, tt.cmdArgs)
		}
		if tt.json {
			var r adminapi.Reply
			if err := json.Unmarshal([]byte(out), &r); err != nil || !r.OK {
				t.Errorf("%v: -json output %q: %v", tt.args, out, err)
			}
		} else if !strings.Contains(out, "log level set to debug") && tt.cmd == "log-level" {
			t.Errorf("%v: output %q", tt.args, out)
		}
	}
}

func TestExitStatuses(t *testing.T) {
	sock, _ := fakeAdmin(t, adminapi.Reply{Error: `unknown command "x"`})
	if _, errs, code := run([]string{"-socket", sock, "x"}, nil); code != ExitReply || !strings.Contains(errs, `unknown command "x"`) {
		t.Errorf("error reply: exit %d, %q", code, errs)
	}
	if out, _, code := run([]string{"-socket", sock, "-json", "x"}, nil); code != ExitReply || !json.Valid([]byte(out)) {
		t.Errorf("error reply with -json: exit %d, %q", code, out)
	}
	missing := filepath.Join(t.TempDir(), "none.sock")
	if _, errs, code := run([]string{"-socket", missing, "status"}, nil); code != ExitUnreachable || !strings.Contains(errs, "cannot reach") {
		t.Errorf("no server: exit %d, %q", code, errs)
	}
	if _, errs, code := run([]string{"status"}, map[string]string{SocketEnv: missing}); code != ExitUnreachable || !strings.Contains(errs, missing) {
		t.Errorf("socket from the environment: exit %d, %q", code, errs)
	}
	if _, errs, code := run(nil, nil); code != ExitUsage || !strings.Contains(errs, "usage") {
		t.Errorf("no command: exit %d, %q", code, errs)
	}
	if _, _, code := run([]string{"-bogus"}, nil); code != ExitUsage {
		t.Errorf("unknown flag: exit %d", code)
	}
	if _, errs, code := run([]string{"status"}, nil); code != ExitUnreachable || !strings.Contains(errs, DefaultSocket) {
		t.Errorf("default socket: exit %d, %q", code, errs)
	}
	// A socket file nothing answers on: gatehouse stopped and could not
	// remove it.
	stale := filepath.Join(t.TempDir(), "admin.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	if _, errs, code := run([]string{"-socket", stale, "status"}, nil); code != ExitUnreachable || !strings.Contains(errs, "gatehouse is not running") {
		t.Errorf("stale socket: exit %d, %q", code, errs)
	}
}

// -version prints gatehousectl's own version without reaching any socket,
// and gatehousectl does not link the supervisor to know it.
func TestVersionFlag(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "none.sock")
	for _, args := range [][]string{{"-version"}, {"-socket", missing, "-version"}, {"status", "-version"}} {
		out, errs, code := run(args, nil)
		if code != ExitOK || out != "gatehousectl "+version.Version+"\n" || errs != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, errs)
		}
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list gatehousectl's packages")
	}
	deps, err := exec.Command(gobin, "list", "-deps", "github.com/gatehouse-dev/gatehouse/cmd/gatehousectl").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range strings.Fields(string(deps)) {
		if p == "github.com/gatehouse-dev/gatehouse/supervisor" {
			t.Errorf("gatehousectl links %s", p)
		}
	}
}

func TestStatusTable(t *testing.T) {
	siteExpiry := time.Now().Add(49 * time.Hour)
	sock, _ := fakeAdmin(t, adminapi.Reply{OK: true, Status: &adminapi.Status{
		Version: "v1.2.3", PID: 42, UptimeSeconds: 125, ConfigFile: "/etc/gatehouse.hcl",
		Listeners: []string{"127.0.0.1:8080", "[::1]:8080"}, Pool: 32, Share: 8,
		Workers: []adminapi.Worker{
			{Slot: 0, PID: 100, State: "ready", Sandbox: []string{"+namespace/user", "+seccomp"}, Active: 3, Served: 1000, Restarts: 2, Threads: 2},
			{Slot: 1, State: "dead", Restarts: 5, BackoffSeconds: 1.6},
		},
		WorkerDeaths: map[string]uint64{"seccomp": 2, "protocol": 1},
		Streams:      7, Upgrades: 3, StreamsMax: 1024, StreamsRefused: 5, UpgradesRefused: 1,
		Certificates: []adminapi.Certificate{
			{Listener: "https", Name: "site", DNSNames: []string{"example.org", "*.example.org"}, NotAfter: siteExpiry},
			{Listener: "https", Name: "old", DNSNames: []string{"old.example"}, NotAfter: time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)},
		},
	}})
	out, errs, code := run([]string{"-socket", sock, "status"}, nil)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{
		"v1.2.3, pid 42, serving, up 2m5s", "/etc/gatehouse.hcl", "127.0.0.1:8080 [::1]:8080", "32 slots, 8 per client",
		"SLOT", "SANDBOX", "+namespace/user +seccomp", "1.6s", "3 (protocol 1, seccomp 2)",
		"7 streams and 3 upgraded connections open of 1024; refused for the budget: 5 streams, 1 upgrades",
		"https/site: example.org *.example.org; expires " + siteExpiry.UTC().Format(time.DateOnly) + " (in 2 days)",
		"https/old: old.example; EXPIRED 2020-01-02 (",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q:\n%s", want, out)
		}
	}
	lines := strings.Split(out, "\n")
	var w0, w1 string
	for _, l := range lines {
		if strings.HasPrefix(l, "0 ") {
			w0 = l
		}
		if strings.HasPrefix(l, "1 ") {
			w1 = l
		}
	}
	if f := strings.Fields(w0); len(f) != 10 || f[2] != "ready" || f[3] != "2" || f[4] != "3" {
		t.Errorf("ready worker row %q: want its 2 threads and 3 active", w0)
	}
	if f := strings.Fields(w1); len(f) != 9 || f[1] != "-" || f[2] != "dead" || f[3] != "-" {
		t.Errorf("dead worker row %q", w1)
	}
}

// Strings in a reply may come from workers (sandbox layer names) and clients:
// none reaches the terminal raw.
func TestTablesEscapeStrings(t *testing.T) {
	forged := "seccomp\r\x1b[2K[ERROR] gatehouse.dispatcher: forged"
	sock, _ := fakeAdmin(t, adminapi.Reply{OK: true, Workers: []adminapi.Worker{
		{Slot: 0, PID: 7, State: "ready\x1b[31m", Sandbox: []string{"+landlock", "+" + forged, "+two words"}},
	}})
	out, errs, code := run([]string{"-socket", sock, "workers"}, nil)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if strings.ContainsAny(out, "\r\x1b") {
		t.Errorf("raw control bytes reach the terminal: %q", out)
	}
	for _, want := range []string{"+landlock", `"+seccomp\r\x1b[2K[ERROR] gatehouse.dispatcher: forged"`, `"+two words"`, `"ready\x1b[31m"`} {
		if !strings.Contains(out, want) {
			t.Errorf("workers output lacks %s:\n%s", want, out)
		}
	}
}

func TestDrainSaysWhatItDoes(t *testing.T) {
	_, errs, code := run([]string{"-h"}, nil)
	if code != ExitOK || !strings.Contains(errs, "shutdown_grace") || !strings.Contains(errs, "cut the rest") {
		t.Errorf("usage (exit %d) does not say what drain does:\n%s", code, errs)
	}
}

func TestUpstreamsTable(t *testing.T) {
	sock, reqs := fakeAdmin(t, adminapi.Reply{OK: true, Upstreams: []adminapi.Upstream{{
		Name: "app", MaxConnections: 4, Share: 2, Held: 3, Reclaims: 1,
		Addresses: []adminapi.UpstreamAddress{
			{Address: "127.0.0.1:9000", State: "up", Dials: 10},
			{Address: "127.0.0.1:9001", State: "down", Fails: 1, Dials: 3, Failures: 1, DownForSeconds: 7.2, LastError: "connect: connection refused"},
			{Address: "127.0.0.1:9002", Host: "localhost:9002", State: "up"},
			{Address: "unix:/run/app.sock", State: "failing", Fails: 2, Dials: 2, Failures: 2},
		},
	}}})
	out, errs, code := run([]string{"-socket", sock, "upstreams"}, nil)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if r := <-reqs; r.Command != adminapi.CmdUpstreams {
		t.Errorf("sent %q, want %q", r.Command, adminapi.CmdUpstreams)
	}
	for _, want := range []string{"UPSTREAM", "127.0.0.1:9000", "down (7s left)", `"connect: connection refused"`, "PER WORKER",
		"127.0.0.1:9002 (localhost:9002)", "failing"} {
		if !strings.Contains(out, want) {
			t.Errorf("upstreams output lacks %q:\n%s", want, out)
		}
	}
	t.Log("\n" + out)
}

// A client key refused for having had connections at dying workers shows
// its deaths and the penalty left; one receiving bodies outside the pool
// shows its share of the body budget.
func TestClientsTable(t *testing.T) {
	sock, _ := fakeAdmin(t, adminapi.Reply{OK: true, Clients: []adminapi.Client{
		{Key: "127.0.0.2", Deaths: 0, PenaltySeconds: 41.7},
		{Key: "127.0.0.3", Conns: 2, Out: 1, Deaths: 1},
		{Key: "127.0.0.4", Conns: 3, BodyConns: 2, BodyBytes: 2000},
	}})
	out, errs, code := run([]string{"-socket", sock, "clients"}, nil)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.Contains(lines[0], "DEATHS") || !strings.Contains(lines[0], "REFUSED") || !strings.Contains(lines[0], "BODIES") {
		t.Fatalf("clients output:\n%s", out)
	}
	if f := strings.Fields(lines[1]); len(f) != 9 || f[0] != "127.0.0.2" || f[7] != "for" || f[8] != "42s" {
		t.Errorf("refused row %q", lines[1])
	}
	if f := strings.Fields(lines[2]); len(f) != 8 || f[0] != "127.0.0.3" || f[5] != "-" || f[6] != "1" || f[7] != "-" {
		t.Errorf("other row %q", lines[2])
	}
	if f := strings.Fields(lines[3]); len(f) != 10 || f[0] != "127.0.0.4" || f[5] != "2" || f[6] != "(2000" {
		t.Errorf("bodies row %q", lines[3])
	}
}

// The cluster line says whether the store is shared or down, and why.
func TestStatusCluster(t *testing.T) {
	since := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		c    adminapi.Cluster
		want string
	}{
		{adminapi.Cluster{Instance: "edge-1", Address: "10.0.0.5:6379", Up: true, Since: since, SharedTickets: true},
			"instance edge-1, store 10.0.0.5:6379 up: rate limits and penalties shared since 2026-12-03T08:00:00Z; ticket keys shared"},
		{adminapi.Cluster{Instance: "edge-1", Address: "10.0.0.5:6379", Since: since, Error: "dial tcp: connection refused"},
			`DOWN ("dial tcp: connection refused"): rate limits and penalties are this instance's own since 2026-12-03T08:00:00Z; ticket keys per instance`},
	} {
		c := tc.c
		sock, _ := fakeAdmin(t, adminapi.Reply{OK: true, Status: &adminapi.Status{Version: "v1", Cluster: &c}})
		out, errs, code := run([]string{"-socket", sock, "status"}, nil)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		if !strings.Contains(out, tc.want) {
			t.Errorf("status lacks %q:\n%s", tc.want, out)
		}
	}
	sock, _ := fakeAdmin(t, adminapi.Reply{OK: true, Status: &adminapi.Status{Version: "v1"}})
	if out, _, _ := run([]string{"-socket", sock, "status"}, nil); strings.Contains(out, "cluster") {
		t.Errorf("a status without a cluster block shows one:\n%s", out)
	}
}

// conns says how many connections are before a first request and how many
// at a worker in it (an SSE stream is not "before a first request"), and
// lists every state the supervisor names in its order.
func TestConnsTable(t *testing.T) {
	sock, _ := fakeAdmin(t, adminapi.Reply{OK: true, Conns: &adminapi.Conns{
		ByState: map[string]int{"proxy": 1, "fresh": 2, "head": 1, "waiting": 0, "at_worker": 3, "idle": 4, "linger": 0},
		Total:   11, AtWorkers: 1, Queued: 4, InFirstRequest: 2, Pool: 32, Share: 8,
	}})
	out, errs, code := run([]string{"-socket", sock, "conns"}, nil)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(out, "4 before a first request, 2 in a first request") {
		t.Errorf("conns output:\n%s", out)
	}
	prev := -1
	for _, st := range []string{"proxy", "fresh", "head", "waiting", "at_worker", "idle", "linger", "total"} {
		i := strings.Index(out, "\n"+st+" ")
		if i < 0 && strings.HasPrefix(out, st+" ") {
			i = 0
		}
		if i <= prev {
			t.Errorf("state %s at %d, after %d:\n%s", st, i, prev, out)
		}
		prev = i
	}
}

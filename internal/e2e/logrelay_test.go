package e2e

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/supervisor/view"
	"golang.org/x/sys/unix"
	pb "google.golang.org/protobuf/proto"
)

// loudLines are what the "loud" hostile worker prints before its flood: a
// supervisor line printed raw, the same line as hclog JSON trying to set the
// module, level and attribution fields, and CR/ESC sequences that would
// rewrite or recolour an operator's terminal line.
var loudLines = []string{
	`2026-12-01T00:00:00.000Z [ERROR] gatehouse.dispatcher: killing worker: worker=1 pid=1 reason="FORGED-RAW"`,
	`{"@level":"error","@module":"gatehouse.dispatcher","@message":"killing worker","worker":1,"pid":1,"reason":"FORGED-JSON"}`,
	"FORGED-CR\r\x1b[2K\x1b[31m2026-12-01T00:00:00.000Z [ERROR] gatehouse.dispatcher: killing worker",
	`{"@level":"error","@message":"FORGED-ESC\r\u001b[2K","path":"/\n2026-12-01T00:00:00.000Z [ERROR] gatehouse.dispatcher: FORGED-NL"}`,
}

// loudFlood is how many lines the loud worker floods its output with.
const loudFlood = 20000

// loudWorker reports Ready, prints loudLines and loudFlood more lines as
// fast as the pipe takes them, then answers pings and serves what it is
// dispatched until the supervisor drains it.
func loudWorker() int {
	ch := hostileChannel()
	var out bytes.Buffer
	for _, l := range loudLines {
		out.WriteString(l + "\n")
	}
	for i := 0; i < loudFlood; i++ {
		fmt.Fprintf(&out, `{"@level":"error","@message":"flood %d"}`+"\n", i)
	}
	os.Stderr.Write(out.Bytes())
	for {
		var f proto.Frame
		fd, err := ch.Recv(&f)
		if err != nil {
			return 0
		}
		switch b := f.Body.(type) {
		case *proto.Frame_Ping:
			go ch.Send(&proto.Frame{Body: &proto.Frame_Pong{Pong: &proto.Pong{Seq: b.Ping.GetSeq()}}}, -1)
		case *proto.Frame_Dispatch:
			go serveCanned(ch, b.Dispatch, fd)
			fd = -1
		case *proto.Frame_Drain:
			return 0
		}
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// A worker's output cannot pass for the supervisor's, cannot reach the
// terminal raw, and cannot flood the log: every relayed line is attributed
// by the supervisor's fields, escaped, and rate-limited, with the dropped
// lines counted (docs/DESIGN.md §6.4).
func TestWorkerOutputIsRelayedSafely(t *testing.T) {
	start := time.Now()
	h := startHostile(t, "loud")
	relayed := regexp.MustCompile(`(?m)^\S+ \[\w+\] +gatehouse\.worker: worker=0 pid=(\d+) (msg|output)=`)
	total := len(loudLines) + loudFlood
	var s view.Snapshot
	var logs string
	s = h.waitFor("every line of the loud worker relayed or dropped", 30*time.Second, func(s view.Snapshot) bool {
		logs = h.logs.String()
		return len(relayed.FindAllString(logs, -1))+int(s.Counters["worker_log_lines_dropped"]) >= total
	})
	elapsed := time.Since(start)
	if testing.Verbose() {
		t.Logf("log:\n%.8000s", logs)
	}

	if i := strings.IndexAny(logs, "\r\x1b"); i >= 0 {
		t.Errorf("a raw CR or ESC reached the log at byte %d: %q", i, logs[max(0, i-80):min(len(logs), i+80)])
	}
	pid := strconv.Itoa(s.Workers[0].PID)
	forged := 0
	for _, line := range strings.Split(logs, "\n") {
		if !strings.Contains(line, "FORGED") {
			continue
		}
		forged++
		m := relayed.FindStringSubmatch(line)
		if m == nil || m[1] != pid {
			t.Errorf("a forged line is not attributed to worker 0 (pid %s) by the supervisor:\n%s", pid, line)
		}
	}
	if forged != len(loudLines) {
		t.Errorf("%d log lines hold the forged text, want %d (one worker line is one log line)", forged, len(loudLines))
	}
	if regexp.MustCompile(`(?m)^\S+ \[ERROR\] gatehouse\.dispatcher: killing worker`).MatchString(logs) {
		t.Errorf("a line passes for the dispatcher's")
	}

	// The flood: at most the relay's burst (1000 lines) plus its rate (100
	// lines a second) for as long as the test ran got through.
	n := len(relayed.FindAllString(logs, -1))
	dropped := s.Counters["worker_log_lines_dropped"]
	t.Logf("%d lines relayed, %d dropped in %v", n, dropped, elapsed.Round(time.Millisecond))
	if limit := 1000 + int(100*elapsed.Seconds()) + 1; n > limit {
		t.Errorf("%d lines relayed in %v, over the relay's limit of %d", n, elapsed.Round(time.Millisecond), limit)
	}
	if dropped == 0 || n+int(dropped) != total {
		t.Errorf("%d relayed + %d dropped, want %d lines accounted for", n, dropped, total)
	}
	if !strings.Contains(logs, "lines dropped: worker=0 pid="+pid) {
		t.Errorf("no notice of the dropped lines")
	}
	var metrics bytes.Buffer
	s.WritePrometheus(&metrics)
	if !strings.Contains(metrics.String(), fmt.Sprintf("gatehouse_worker_log_lines_dropped_total %d", dropped)) {
		t.Errorf("the metrics lack gatehouse_worker_log_lines_dropped_total %d", dropped)
	}
	if k := s.Counters["worker_kills"]; k != 0 {
		t.Errorf("worker_kills = %d: printing is not a violation", k)
	}
	cl := newClient(t, "127.0.0.2", h.addr)
	if resp, _, err := cl.get("/ok"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("request after the flood: %v", err)
	}
}

// forgedLayersWorker reports Ready with a sandbox layer whose name would
// rewrite the operator's terminal line in gatehousectl and the log, then
// waits to be killed.
func forgedLayersWorker() int {
	b, _ := pb.Marshal(&proto.Frame{Body: &proto.Frame_Ready{Ready: &proto.Ready{Pid: uint32(os.Getpid()), Layers: []*proto.SandboxLayer{
		{Name: "seccomp\r\x1b[2K+landlock", Applied: true},
	}}}})
	unix.Sendmsg(3, b, nil, nil, 0)
	time.Sleep(30 * time.Second)
	return 0
}

// A worker's sandbox report is checked before anyone sees it: a layer name
// outside the allowed form is a violation, and nothing of it reaches the log
// raw or gatehousectl at all.
func TestForgedSandboxLayersKillTheWorker(t *testing.T) {
	h := startHostile(t, "forged-layers")
	h.expectDeaths(1)
	s := h.waitFor("the worker with forged layers to be killed", 20*time.Second, func(s view.Snapshot) bool {
		return s.Counters["worker_kills"] >= 1
	})
	logs := h.logs.String()
	if strings.ContainsAny(logs, "\r\x1b") {
		t.Errorf("a raw CR or ESC reached the log:\n%q", logs)
	}
	if !strings.Contains(logs, "sandbox layer named") {
		t.Errorf("the kill does not name the violation:\n%s", logs)
	}
	for _, l := range s.Workers[0].Sandbox {
		if strings.Contains(l, "seccomp") {
			t.Errorf("the forged layer is reported: %q", l)
		}
	}
}

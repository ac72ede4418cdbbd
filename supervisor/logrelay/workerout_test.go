package logrelay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// hostileLines are what a compromised worker prints to pass for the
// supervisor, hide text, or break lines apart.
var hostileLines = []string{
	// A supervisor line, printed raw.
	`2026-12-01T00:00:00.000Z [ERROR] gatehouse.dispatcher: killing worker: worker=1 pid=1 reason="FORGED"`,
	// The same as hclog JSON, trying to set the module, the attribution
	// fields and the message.
	`{"@level":"error","@module":"gatehouse.dispatcher","@message":"killing worker","worker":1,"pid":1,"msg":"x","reason":"FORGED"}`,
	// CR and ESC: overwrite the terminal line, recolour it.
	"plain\r\x1b[2K\x1b[31m[ERROR] gatehouse.dispatcher: FORGED",
	`{"@level":"info","@message":"a\rb\u001b[2Kc\nd","k\u001bey":"v\r\u001b[0m","@caller":"x"}`,
	// A field that tries to end the line in text format.
	`{"@level":"warn","@message":"m","path":"/x\n2026-12-01T00:00:00.000Z [ERROR] gatehouse.dispatcher: FORGED"}`,
}

func relayInto(t *testing.T, json bool) (*WorkerOutput, *bytes.Buffer, *atomic.Uint64) {
	t.Helper()
	var buf bytes.Buffer
	log := hclog.New(&hclog.LoggerOptions{Name: "gatehouse", Output: &buf, JSONFormat: json, Level: hclog.Trace})
	var total atomic.Uint64
	return NewWorkerOutput(log, 3, 4242, &total), &buf, &total
}

func TestRelayTextAttributesAndEscapes(t *testing.T) {
	r, buf, _ := relayInto(t, false)
	r.Run(strings.NewReader(strings.Join(hostileLines, "\n") + "\n"))
	out := buf.String()
	if strings.ContainsAny(out, "\r\x1b") {
		t.Errorf("raw CR or ESC relayed:\n%q", out)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != len(hostileLines) {
		t.Fatalf("%d lines relayed for %d written (one worker line must stay one line):\n%s", len(lines), len(hostileLines), out)
	}
	head := regexp.MustCompile(`^\S+ \[(INFO|WARN|ERROR)\] +gatehouse\.worker: worker=3 pid=4242 (msg|output)=`)
	for _, l := range lines {
		if !head.MatchString(l) {
			t.Errorf("line not attributed to the worker by the supervisor's fields first:\n%s", l)
		}
	}
	for _, want := range []string{`msg="killing worker" module=gatehouse.dispatcher worker.worker=1 worker.pid=1 worker.msg=x reason=FORGED`, `worker.k_ey=`, `msg="a\rb\x1b[2Kc\nd"`} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %s:\n%s", want, out)
		}
	}
}

func TestRelayJSONAttributes(t *testing.T) {
	r, buf, _ := relayInto(t, true)
	r.Run(strings.NewReader(strings.Join(hostileLines, "\n") + "\n"))
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != len(hostileLines) {
		t.Fatalf("%d lines relayed for %d written:\n%s", len(lines), len(hostileLines), buf.String())
	}
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not JSON: %q: %v", l, err)
		}
		if m["@module"] != "gatehouse.worker" || m["worker"] != 3.0 || m["pid"] != 4242.0 || m["@message"] != "" {
			t.Errorf("module, worker, pid or message set by the worker: %s", l)
		}
	}
}

// A line keeps its fields in the order the worker wrote them, and its
// numbers as integers.
func TestRelayOrderAndIntegers(t *testing.T) {
	const line = `{"@level":"info","@message":"request","@module":"worker.access","@timestamp":"t","method":"GET","path":"/big","status":200,"bytes":104857600,"duration":"1.5s","ratio":0.25,"client":"127.0.0.2"}`
	for i := 0; i < 3; i++ {
		r, buf, _ := relayInto(t, false)
		r.Run(strings.NewReader(line + "\n"))
		want := ` [INFO]  gatehouse.worker: worker=3 pid=4242 msg=request module=worker.access method=GET path=/big status=200 bytes=104857600 duration=1.5s ratio=0.25 client=127.0.0.2` + "\n"
		if _, got, _ := strings.Cut(buf.String(), " "); " "+got != want {
			t.Fatalf("relayed\n%q\nwant\n%q", " "+got, want)
		}
	}
}

func TestRelayRateLimit(t *testing.T) {
	r, buf, total := relayInto(t, false)
	now := time.Unix(1000, 0)
	r.now = func() time.Time { return now }
	var in strings.Builder
	const over = 500
	for i := 0; i < relayBurst+over; i++ {
		fmt.Fprintf(&in, `{"@level":"error","@message":"flood %d"}`+"\n", i)
	}
	r.Run(strings.NewReader(in.String()))
	relayed := strings.Count(buf.String(), "msg=\"flood ")
	if relayed != relayBurst || total.Load() != over {
		t.Errorf("at one instant: %d relayed, %d dropped; want %d and %d", relayed, total.Load(), relayBurst, over)
	}
	// One notice at the first drop, one for the rest when the output ends.
	notices := regexp.MustCompile(`lines dropped: worker=3 pid=4242 dropped=(\d+)`).FindAllStringSubmatch(buf.String(), -1)
	sum := 0
	for _, m := range notices {
		n, _ := strconv.Atoi(m[1])
		sum += n
	}
	if len(notices) != 2 || sum != over {
		t.Errorf("%d notices of dropped lines for %d lines, want 2 for %d:\n%s", len(notices), sum, over, tail(buf.String()))
	}
	// A second later the bucket holds relayRate lines again.
	buf.Reset()
	now = now.Add(time.Second)
	r.Run(strings.NewReader(in.String()))
	if relayed := strings.Count(buf.String(), "msg=\"flood "); relayed != relayRate {
		t.Errorf("a second later: %d relayed, want %d", relayed, relayRate)
	}
}

// A line over relayMaxLine is dropped and counted, and the lines after it
// are relayed.
func TestRelayLongLine(t *testing.T) {
	r, buf, total := relayInto(t, false)
	r.Run(strings.NewReader("before\n" + strings.Repeat("x", relayMaxLine+10) + "\nafter\n"))
	if total.Load() != 1 || !strings.Contains(buf.String(), "output=before") || !strings.Contains(buf.String(), "output=after") {
		t.Errorf("dropped %d; output:\n%s", total.Load(), tail(buf.String()))
	}
}

func tail(s string) string {
	if len(s) > 2000 {
		return "…" + s[len(s)-2000:]
	}
	return s
}

// FuzzRelayLine feeds one worker line to the relay: whatever its bytes, the
// output is one attributed line with no raw control byte.
func FuzzRelayLine(f *testing.F) {
	for _, l := range hostileLines {
		f.Add([]byte(l))
	}
	f.Add([]byte(`{"@level":"info","@message":"request","@module":"worker.access","bytes":104857600,"ratio":1e400,"n":-0,"a":[1,{"b":null}]}`))
	f.Add([]byte(`{"a":1}{"b":2}`))
	f.Add([]byte(`{"\u0000":"\u2028","@level":7}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		line = bytes.ReplaceAll(line, []byte("\n"), nil)
		if len(line) > relayMaxLine {
			return
		}
		var buf bytes.Buffer
		log := hclog.New(&hclog.LoggerOptions{Name: "gatehouse", Output: &buf, Level: hclog.Trace})
		var total atomic.Uint64
		NewWorkerOutput(log, 1, 2, &total).line(line, time.Now())
		out := buf.String()
		if strings.Count(out, "\n") != 1 || !strings.HasSuffix(out, "\n") {
			t.Fatalf("%q relayed as %d lines: %q", line, strings.Count(out, "\n"), out)
		}
		if strings.ContainsAny(out, "\r\x1b\x00") {
			t.Fatalf("raw control byte relayed: %q", out)
		}
		if !regexp.MustCompile(`^\S+ \[\w+\] +gatehouse\.worker: worker=1 pid=2 (msg|output)=`).MatchString(out) {
			t.Fatalf("not attributed: %q", out)
		}
	})
}

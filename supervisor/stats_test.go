package supervisor

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/proto"
)

// statsOf asks the loop for stats as worker p and returns the reply's text.
func (h *loopHarness) statsOf(p *fakeProc, id uint64) string {
	h.t.Helper()
	if err := p.Send(&proto.Frame{Id: id, Body: &proto.Frame_StatsRequest{StatsRequest: &proto.StatsRequest{}}}, -1); err != nil {
		h.t.Fatal(err)
	}
	f := h.next(p)
	if f.GetId() != id || f.GetStatsReply() == nil {
		h.t.Fatalf("got %v, want StatsReply %d", f.Frame, id)
	}
	return string(f.GetStatsReply().GetText())
}

// TestStatsCached: a worker's stats come from a rendering at most a second
// old on the loop's clock: a connection accepted after one rendering shows
// only once the clock has moved past a second.
func TestStatsCached(t *testing.T) {
	h := startLoop(t, baseConfig(1, 8, ""))
	p := h.workers[0]
	const before, after = "gatehouse_connections_accepted_total 0\n", "gatehouse_connections_accepted_total 1\n"
	if text := h.statsOf(p, 1); !strings.Contains(text, before) {
		t.Fatalf("first stats lack %q:\n%s", before, text)
	}
	h.dial("127.0.0.2")
	h.waitFor("accepted", func(s Snapshot) bool { return s.Counters["accepted"] == 1 })
	for id := uint64(2); id < 12; id++ {
		if text := h.statsOf(p, id); !strings.Contains(text, before) {
			t.Fatalf("stats %d within the second: not the cached rendering:\n%s", id, text)
		}
	}
	h.advance(statsMaxAge + time.Millisecond)
	if text := h.statsOf(p, 12); !strings.Contains(text, after) {
		t.Fatalf("stats after a second lack %q:\n%s", after, text)
	}
	if s := h.snapshot(); s.Counters["ipc_overloaded"] != 0 || s.Counters["worker_kills"] != 0 {
		t.Fatalf("counters %v", s.Counters)
	}
}

// TestCutMetrics: a rendering over a frame is cut after its last whole metric
// family (or line) that fits, never inside a line, and says so.
func TestCutMetrics(t *testing.T) {
	family := func(i, samples int) string {
		var b strings.Builder
		fmt.Fprintf(&b, "# HELP gatehouse_m%d_total Help.\n# TYPE gatehouse_m%d_total counter\n", i, i)
		for j := 0; j < samples; j++ {
			fmt.Fprintf(&b, "gatehouse_m%d_total{worker=\"%d\"} %d\n", i, j, j)
		}
		return b.String()
	}
	var many, one strings.Builder
	for i := 0; i < 400; i++ {
		many.WriteString(family(i, 5))
	}
	one.WriteString(family(0, 4000))
	small := family(1, 3)

	for _, tc := range []struct {
		name        string
		text        string
		wholeFamily bool
	}{
		{"fits", small, true},
		{"many families", many.String(), true},
		{"one large family", one.String(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const max = 4096
			got := cutMetrics([]byte(tc.text), max)
			if len(tc.text) <= max {
				if string(got) != tc.text {
					t.Fatalf("a rendering that fits was changed")
				}
				return
			}
			if len(got) > max {
				t.Fatalf("%d bytes, over %d", len(got), max)
			}
			kept, ok := bytes.CutSuffix(got, []byte(statsTruncated))
			if !ok {
				t.Fatalf("cut rendering does not end with %q", statsTruncated)
			}
			if !strings.HasPrefix(tc.text, string(kept)) || len(kept) == 0 || kept[len(kept)-1] != '\n' {
				t.Fatalf("kept part is not whole lines of the rendering")
			}
			rest := tc.text[len(kept):]
			if tc.wholeFamily && !strings.HasPrefix(rest, "# HELP ") {
				t.Fatalf("cut inside a family: the rest starts %q", rest[:min(40, len(rest))])
			}
			if len(rest) < max/4 && tc.wholeFamily {
				t.Fatalf("only %d bytes cut: the check is not exercised", len(rest))
			}
		})
	}
}

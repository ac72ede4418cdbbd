package supervisor

import (
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/supervisor/view"
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
	h.waitFor("accepted", func(s view.Snapshot) bool { return s.Counters["accepted"] == 1 })
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

package poll_test

import (
	"os"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/supervisor/internal/poll"
)

func countFDs(tb testing.TB) int {
	tb.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		tb.Skipf("no /proc/self/fd: %v", err)
	}
	return len(ents)
}

func TestNoFDLeak(t *testing.T) {
	before := countFDs(t)
	for range 50 {
		p, err := poll.New()
		if err != nil {
			t.Fatal(err)
		}
		p.Wake()
		evs := make([]poll.Event, 4)
		if _, err := p.Wait(evs, time.Second); err != nil {
			t.Fatal(err)
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if after := countFDs(t); after != before {
		t.Errorf("open fds: %d before, %d after 50 New/Close", before, after)
	}
}

package memtrim

import (
	"context"
	"sync"
	"testing"
	"time"
	"weak"
)

func TestDue(t *testing.T) {
	p := Policy{Interval: time.Second, Burst: 100, Quiet: 10}
	for _, c := range []struct {
		since, last uint64
		want        bool
	}{
		{0, 0, false},    // nothing allocated: nothing to give back
		{99, 0, false},   // under a burst
		{100, 0, true},   // a burst, then quiet
		{100, 9, true},   // a trickle counts as quiet
		{100, 10, false}, // still allocating: a trim would be undone at once
		{5000, 4000, false},
	} {
		if got := p.due(c.since, c.last); got != c.want {
			t.Errorf("due(%d, %d) = %v, want %v", c.since, c.last, got, c.want)
		}
	}
}

var sink [][]byte

// TestRunTrimsAfterBurst: a burst of allocation followed by quiet triggers
// one trim: the garbage is collected, and a pooled buffer, which a sync.Pool
// keeps through one collection, is gone too.
func TestRunTrimsAfterBurst(t *testing.T) {
	var pool sync.Pool
	buf := make([]byte, 16<<10)
	pool.Put(&buf)
	pooled := weak.Make(&buf)
	buf = nil

	for i := 0; i < 256; i++ { // 4 MiB, dropped at once: garbage
		sink = append(sink, make([]byte, 16<<10))
	}
	burst := weak.Make(&sink[0][0])
	sink = nil

	trims := make(chan struct{}, 8)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go Run(ctx, Policy{Interval: 10 * time.Millisecond, Burst: 2 << 20, Quiet: 2 << 20}, func() { trims <- struct{}{} })
	select {
	case <-trims:
	case <-time.After(30 * time.Second):
		t.Fatal("no trim after a 4 MiB burst")
	}
	if pooled.Value() != nil {
		t.Error("a pooled buffer outlived the trim")
	}
	if burst.Value() != nil {
		t.Error("the burst's garbage outlived the trim")
	}
	// Quiet with nothing new allocated: no second trim.
	for i := 0; i < 20; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case <-trims:
		t.Error("trimmed again without a new burst")
	default:
	}
}

package worker

import (
	"testing"
	"time"
)

// TestIdleServersEnd: once no dispatch comes for serverIdle, a worker's
// server goroutines end (what they held can go back to the system), and the
// next dispatch starts one again.
func TestIdleServersEnd(t *testing.T) {
	h := startAllocWorker(t, 0)
	req := []byte("GET / HTTP/1.1\r\nHost: example.com\r\n\r\n")
	disp := dispatchBytes(t)
	n := h.responseLen(req, disp)
	h.round(req, disp, n)
	// Done goes out before the goroutine counts itself idle: wait for it,
	// then for it to end (a bound far over serverIdle, for a loaded machine).
	h.waitIdle(1)
	h.waitIdle(0)
	h.round(req, disp, n)
	h.waitIdle(1)
}

// waitIdle waits up to 30 s for the worker's idle server goroutines to
// number want.
func (h *allocHarness) waitIdle(want int32) {
	h.t.Helper()
	for i := 0; i < 3000 && h.w.srv.idle.Load() != want; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if got := h.w.srv.idle.Load(); got != want {
		h.t.Fatalf("%d idle server goroutines, want %d", got, want)
	}
}

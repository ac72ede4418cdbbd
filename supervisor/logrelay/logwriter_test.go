package logrelay

import (
	"bytes"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// With standard error a pipe nobody reads, logging never waits: every call
// returns, the lines over the queue are dropped and counted. Without the
// queue, the first write past the pipe's 64 KiB blocks, and with it, under
// hclog's lock, every goroutine that logs, the dispatcher loop among them.
func TestLogWriterNeverBlocksOnAnUnreadPipe(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close() // open and never read
	defer w.Close()
	var notices atomic.Int64
	out := NewLogWriter(w, func(uint64) { notices.Add(1) })
	log := hclog.New(&hclog.LoggerOptions{Output: out, JSONFormat: true})
	const goroutines, lines = 4, 20000 // 80 000 lines, about 10 MB: 150 times the pipe
	var wg sync.WaitGroup
	done := make(chan struct{})
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < lines; i++ {
				log.Info("a line of the loop's", "i", i, "padding", strings.Repeat("x", 64))
			}
		}()
	}
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("logging blocked on a standard error nobody reads")
	}
	if d := out.Dropped(); d == 0 || d >= goroutines*lines {
		t.Fatalf("%d lines dropped of %d, want some and not all", d, goroutines*lines)
	}
	if notices.Load() != 0 {
		t.Errorf("a drop was reported while the destination took nothing")
	}
}

// Once the destination takes lines again, the drops are reported, and
// every line that was not dropped arrived whole, C1 controls and DEL
// escaped.
func TestLogWriterReportsDropsAndEscapesC1(t *testing.T) {
	var mu sync.Mutex
	var got bytes.Buffer
	gate := make(chan struct{})
	dst := writerFunc(func(p []byte) (int, error) {
		<-gate
		mu.Lock()
		defer mu.Unlock()
		return got.Write(p)
	})
	var reported atomic.Uint64
	out := NewLogWriter(dst, func(n uint64) { reported.Add(n) })
	out.limit = 1000
	out.Write([]byte("first \u009b[2J \x7f\n")) // taken by the copier, which waits at the gate
	time.Sleep(10 * time.Millisecond)
	for i := 0; i < 200; i++ {
		out.Write([]byte("0123456789\n"))
	}
	close(gate)
	out.Flush(10 * time.Second)
	for deadline := time.Now().Add(10 * time.Second); reported.Load() == 0 && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
	}
	mu.Lock()
	s := got.String()
	mu.Unlock()
	kept := strings.Count(s, "0123456789\n")
	if kept == 0 || uint64(kept)+reported.Load() != 200 || out.Dropped() != reported.Load() {
		t.Errorf("%d lines kept, %d reported dropped (%d counted), want 200 in all", kept, reported.Load(), out.Dropped())
	}
	if !strings.HasPrefix(s, `first \u009b[2J \u007f`+"\n") {
		t.Errorf("first line %q", s[:min(len(s), 40)])
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

package logrelay

import (
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// LogWriter is the supervisor's log output: a bounded queue that a goroutine
// of its own copies to the destination (standard error), so that a reader
// of it that is slow or gone never holds the dispatcher loop, nor any other
// goroutine that logs. A line that finds the queue full is dropped and
// counted; the count is reported once the destination takes lines again.
// On its way out, a C1 control (U+0080–U+009F, which hclog's JSON output
// leaves as it is) or DEL in a line becomes its \u escape: a terminal
// obeys U+009B as ESC [.
type LogWriter struct {
	out   io.Writer
	limit int // bytes queued at most

	mu     sync.Mutex
	cond   *sync.Cond
	queued []byte // +checklocks:mu
	// spare is the buffer the copier last wrote, reused. +checklocks:mu
	spare []byte
	// writing is true while the copier writes. +checklocks:mu
	writing bool

	dropped atomic.Uint64 // lines dropped, since start (a metric)
	// notice is called by the copier with the lines dropped since its last
	// call, once the destination took what was queued.
	notice func(dropped uint64)
}

// logQueueLimit bounds the queue: a few thousand lines.
const logQueueLimit = 1 << 20

// NewLogWriter starts copying what is written to it to out. notice, if not
// nil, is called (by the copying goroutine) with the number of lines
// dropped since its last call, once the destination takes lines again; it
// typically logs a warning through the logger writing here.
func NewLogWriter(out io.Writer, notice func(dropped uint64)) *LogWriter {
	w := &LogWriter{out: out, limit: logQueueLimit, notice: notice}
	w.cond = sync.NewCond(&w.mu)
	go w.copy()
	return w
}

// Write queues p, one or more whole lines, and returns at once: it never
// waits for the destination. p is dropped whole when the queue has no room.
func (w *LogWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.queued)+len(p) > w.limit {
		w.dropped.Add(1)
		return len(p), nil
	}
	w.queued = appendLogText(w.queued, p)
	w.cond.Signal()
	return len(p), nil
}

// Flush waits, at most limit, until what was queued has been written: at
// exit, the last lines. It polls, as it runs once.
func (w *LogWriter) Flush(limit time.Duration) {
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		w.mu.Lock()
		done := len(w.queued) == 0 && !w.writing
		w.mu.Unlock()
		if done {
			return
		}
	}
}

// Dropped is the number of lines dropped since start.
func (w *LogWriter) Dropped() uint64 { return w.dropped.Load() }

// copy writes what is queued to the destination, forever.
func (w *LogWriter) copy() {
	var reported uint64
	for {
		w.mu.Lock()
		for len(w.queued) == 0 {
			w.cond.Wait()
		}
		b := w.queued
		w.queued = w.spare[:0]
		w.writing = true
		w.mu.Unlock()
		w.out.Write(b) // an error leaves nothing to report it to
		w.mu.Lock()
		w.spare = b[:0]
		w.writing = false
		w.mu.Unlock()
		if d := w.dropped.Load(); d != reported && w.notice != nil {
			w.notice(d - reported)
			reported = d
		}
	}
}

// appendLogText appends p with every C1 control and DEL replaced by its
// \u escape, valid in a JSON string and readable in text.
func appendLogText(b, p []byte) []byte {
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == 0x7f:
			b = append(b, `\u007f`...)
		case c == 0xc2 && i+1 < len(p) && p[i+1] >= 0x80 && p[i+1] <= 0x9f:
			i++
			b = append(b, '\\', 'u', '0', '0', hexDigit[p[i]>>4], hexDigit[p[i]&0xf])
		default:
			b = append(b, c)
		}
	}
	return b
}

const hexDigit = "0123456789abcdef"

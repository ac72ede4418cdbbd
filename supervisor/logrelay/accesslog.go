// Package logrelay carries log lines out of the supervisor without letting
// a slow destination or an untrusted worker hold it or forge a line: the
// supervisor's own log output (LogWriter, a bounded queue), each worker's
// standard output and error (WorkerOutput, re-emitted attributed, escaped
// and rate-limited) and the workers' access log (Sink, which copies each
// worker's lines from a pipe of its own to the log, checking every line).
// It knows nothing of the loop: the supervisor opens the destination, makes
// the pipes and starts a relay per worker.
package logrelay

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/gatehouse-dev/gatehouse/sandbox"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// The access log (docs/DESIGN.md §6.4). Workers format its lines, but never
// hold its destination: each worker process gets the write end of a pipe of
// its own, and a goroutine of the supervisor's (Sink.Relay) copies whole
// lines from it to the file or standard error, after checking that each is
// an access line as a worker writes it. A worker can thus neither read,
// seek, truncate nor rewrite the log, nor put in it anything that would pass
// for a line of the supervisor's own, another worker's, or a journald
// priority prefix.
const (
	// accessReadBuf is what a relay reads at once: a worker's buffer
	// (access_log_buffer, 64 KiB by default) in one read.
	accessReadBuf = 64 << 10
	// accessMaxLine bounds one line: a head's fields escaped, with room to
	// spare. A longer one is rejected.
	accessMaxLine = 1 << 20
	// streamChunk is the largest write a pipe or a stream socket
	// (standard error, journald) takes whole: on such a destination lines
	// are written in pieces of whole lines no longer than this, so that
	// they never interleave with the supervisor's own log lines mid-line.
	// Appends to a regular file are whole at any size.
	streamChunk = 4096
	// accessWarnEvery spaces the warnings about lines rejected or lost.
	accessWarnEvery = time.Minute
)

// Open opens the access log of cfg for appending: its file, created
// 0640 when missing, or a duplicate of the supervisor's standard error. It
// returns -1 when the access log is off, and whether it created the file.
// The descriptor is close-on-exec, and never given to a worker.
func Open(cfg config.Log) (fd int, created bool, err error) {
	if !cfg.AccessLog {
		return -1, false, nil
	}
	if cfg.AccessLogPath == "" {
		fd, err := unix.FcntlInt(2, unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return -1, false, fmt.Errorf("access log: duplicating standard error: %w", err)
		}
		return fd, false, nil
	}
	const flags = unix.O_WRONLY | unix.O_APPEND | unix.O_CLOEXEC | unix.O_NOCTTY
	fd, err = unix.Open(cfg.AccessLogPath, flags|unix.O_CREAT|unix.O_EXCL, 0o640)
	if err == nil {
		return fd, true, nil
	}
	if errors.Is(err, unix.EEXIST) {
		if fd, err = unix.Open(cfg.AccessLogPath, flags, 0); err == nil {
			return fd, false, nil
		}
	}
	return -1, false, fmt.Errorf("access log: opening %s: %w", cfg.AccessLogPath, err)
}

// Name names the access log's destination for messages.
func Name(cfg config.Log) string {
	if cfg.AccessLogPath == "" {
		return "standard error"
	}
	return cfg.AccessLogPath
}

// Sink is the access log's destination, which the relays of every
// worker write to and a reopen replaces. Safe from any goroutine.
type Sink struct {
	out atomic.Pointer[accessOut]
	log hclog.Logger
	// created is whether the open of the first destination made the file
	// (see Adopt).
	created bool
	// rejected counts lines relays refused as not access lines (a metric).
	rejected atomic.Uint64

	mu     sync.Mutex
	lost   uint64    // lines lost to write errors; +checklocks:mu
	warned time.Time // when lost lines were last reported; +checklocks:mu
}

// accessOut is one opened destination.
type accessOut struct {
	f *os.File
	// chunk bounds a write (0: none), for a destination that is not a
	// regular file.
	chunk int
}

// NewSink returns a sink with no destination yet, reporting to log.
func NewSink(log hclog.Logger) *Sink {
	return &Sink{log: log.Named("access_log")}
}

// Start makes fd, opened at start, the first destination; created is
// whether that open made the file (Open's second result), which Adopt
// needs.
func (k *Sink) Start(fd int, created bool) {
	k.Set(fd)
	k.created = created
}

// Set makes fd the destination and closes the previous one; a write in
// progress on it finishes first (the runtime closes the descriptor once
// the write returns). fd < 0 (the access log turned off) keeps the
// destination, for the lines of workers about to be replaced.
func (k *Sink) Set(fd int) {
	if fd < 0 {
		return
	}
	o := &accessOut{f: os.NewFile(uintptr(fd), "access log"), chunk: streamChunk}
	var st unix.Stat_t
	if unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
		o.chunk = 0
	}
	if old := k.out.Swap(o); old != nil {
		old.f.Close()
	}
}

// Close closes the destination, at exit.
func (k *Sink) Close() {
	if old := k.out.Swap(nil); old != nil {
		old.f.Close()
	}
}

// Adopt gives a file opened at start, and created then, to the account the supervisor drops to, so
// that it can reopen the file after a rotation: logrotate's create gives the
// new file the old one's owner. A file that was there is left as it is, with
// a warning when that account cannot write to it.
func (k *Sink) Adopt(a sandbox.Account, path string) error {
	o := k.out.Load()
	if o == nil || o.chunk != 0 {
		return nil
	}
	if k.created {
		if err := o.f.Chown(a.UID, a.GID); err != nil {
			return fmt.Errorf("access log: giving %s to %s: %w", path, a, err)
		}
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(o.f.Fd()), &st); err != nil {
		return nil
	}
	switch {
	case int(st.Uid) == a.UID && st.Mode&0o200 != 0, int(st.Gid) == a.GID && st.Mode&0o020 != 0, st.Mode&0o002 != 0:
	default:
		k.log.Warn("the access log file is not writable by the account the supervisor runs as: reopening it (SIGUSR1, reload) will fail; give it to that account",
			"path", path, "account", a.String(), "uid", st.Uid, "gid", st.Gid, "mode", fmt.Sprintf("%#o", st.Mode&0o7777))
	}
	return nil
}

// Relay copies worker slot's access lines from r until the worker's end of
// the pipe is closed. A line is written only whole and only if it is an
// access line of format from this worker (accessLine); others are dropped,
// counted and reported. A full destination holds the relay, and so, once the
// pipe is full, the worker's writes: the log loses no line, and the loop
// never waits for either.
func (k *Sink) Relay(r io.Reader, slot int, format Format) {
	buf := make([]byte, accessReadBuf)
	n := 0
	skipping := false // in a line over accessMaxLine, dropped
	var rejected uint64
	var warned time.Time
	for {
		m, err := r.Read(buf[n:])
		n += m
		held := buf[:n]
		if skipping {
			if i := lineEnd(held); i > 0 {
				held, skipping = held[i:], false
			} else {
				held = held[:0]
			}
		}
		end := lastLineEnd(held)
		rejected += k.writeLines(held[:end], slot, format)
		n = copy(buf, held[end:])
		if n == len(buf) { // one line fills the buffer
			if len(buf) < accessMaxLine {
				buf = append(buf, make([]byte, len(buf))...)
			} else {
				rejected++
				n, skipping = 0, true
			}
		}
		if rejected > 0 && time.Since(warned) >= accessWarnEvery {
			k.rejected.Add(rejected)
			k.log.Warn("a worker wrote lines that are not access lines; dropped", "worker", slot, "lines", rejected)
			rejected, warned = 0, time.Now()
		}
		if err != nil {
			if n > 0 || skipping {
				rejected++ // a line without its end
			}
			if rejected > 0 {
				k.rejected.Add(rejected)
				k.log.Warn("a worker wrote lines that are not access lines; dropped", "worker", slot, "lines", rejected)
			}
			return
		}
	}
}

// Rejected counts the lines relays refused as not access lines, since
// start.
func (k *Sink) Rejected() uint64 { return k.rejected.Load() }

// writeLines writes the access lines of b (whole lines) and returns how many
// others it dropped.
func (k *Sink) writeLines(b []byte, slot int, format Format) (rejected uint64) {
	start := 0 // of the run of good lines not written yet
	for i := 0; i < len(b); {
		j := i + lineEnd(b[i:])
		if accessLine(b[i:j-1], slot, format) {
			i = j
			continue
		}
		k.write(b[start:i])
		rejected++
		i, start = j, j
	}
	k.write(b[start:])
	return rejected
}

// write writes whole lines to the destination, in pieces of at most its
// chunk. A write that finds its descriptor closed by a reopen goes on with
// the new one; lines that fail are counted and reported.
func (k *Sink) write(b []byte) {
	for len(b) > 0 {
		o := k.out.Load()
		if o == nil {
			return // off since start: no worker writes
		}
		n := len(b)
		if o.chunk > 0 && n > o.chunk {
			if n = lastLineEnd(b[:o.chunk]); n == 0 { // one line longer than a chunk: whole, alone
				n = lineEnd(b)
			}
		}
		w, err := o.f.Write(b[:n])
		b = b[w:]
		if err == nil {
			continue
		}
		if errors.Is(err, os.ErrClosed) && k.out.Load() != o {
			continue // reopened meanwhile
		}
		e := lineEnd(b)
		if e == 0 {
			e = len(b)
		}
		k.lose(b[:e], err)
		b = b[e:]
	}
}

// lose counts the lines of b as lost and says so, at most once a minute.
func (k *Sink) lose(b []byte, err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, c := range b {
		if c == '\n' {
			k.lost++
		}
	}
	if now := time.Now(); now.Sub(k.warned) >= accessWarnEvery {
		k.warned = now
		k.log.Error("writing the access log", "error", err, "lines_lost", k.lost)
	}
}

// lastLineEnd returns the length of b up to and including its last newline,
// or 0 when it has none.
func lastLineEnd(b []byte) int {
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '\n' {
			return i + 1
		}
	}
	return 0
}

// lineEnd returns the length of b's first line, newline included, or 0
// when it has none.
func lineEnd(b []byte) int {
	for i, c := range b {
		if c == '\n' {
			return i + 1
		}
	}
	return 0
}

package supervisor

import (
	"fmt"
	"os"
	"time"

	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/supervisor/logrelay"
	"golang.org/x/sys/unix"
)

// The loop's side of the logs: it opens the access log, gives each worker
// the write end of a pipe and starts the relay that reads the other
// (docs/DESIGN.md §6.4); logrelay does the copying.

// accessRelaysWait bounds how long Run waits, once every worker was reaped,
// for the relays to copy their last lines.
const accessRelaysWait = 5 * time.Second

// ReopenAccessLog opens the access log again and makes it where every
// worker's lines go (SIGUSR1, as nginx does after logrotate moved the file).
// The relays finish the write in progress on the old descriptor, so no line
// is lost. On error the log stays where it was.
func (s *Supervisor) ReopenAccessLog() error {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	return s.reopenAccessLog()
}

// reopenAccessLog is ReopenAccessLog with reloadMu held.
// +checklocks:s.reloadMu
func (s *Supervisor) reopenAccessLog() error {
	fd, _, err := logrelay.Open(s.accessLog)
	if err != nil {
		s.log.Error("reopening the access log; it stays where it was", "error", err)
		return err
	}
	if fd >= 0 {
		s.access.Set(fd)
		s.log.Info("access log reopened", "path", logrelay.Name(s.accessLog))
	}
	return nil
}

// sendAccessLog gives a worker the write end of a pipe for its access lines,
// and starts the relay that copies them out. A worker whose access log is on
// needs it before its first Dispatch: one that cannot be given it is stopped.
func (d *dispatcher) sendAccessLog(w *workerProc) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		d.killWorker(w, fmt.Sprintf("creating its access log pipe: %v", err))
		return
	}
	// The read end under the runtime's poller: a relay waiting for lines
	// holds no thread. The worker's end stays blocking, as a file is.
	if err := unix.SetNonblock(p[0], true); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		d.killWorker(w, fmt.Sprintf("creating its access log pipe: %v", err))
		return
	}
	format := logrelay.FormatOf(w.spec.cfg.Log.AccessLogFormat)
	d.s.accessRelays.Add(1)
	go func() {
		defer d.s.accessRelays.Done()
		r := os.NewFile(uintptr(p[0]), "access log pipe")
		d.s.access.Relay(r, w.slot, format)
		r.Close()
	}()
	d.sendOwned(w, &proto.Frame{Body: &proto.Frame_AccessLog{AccessLog: &proto.AccessLog{}}}, p[1])
}

// waitAccessRelays waits, at most accessRelaysWait, for the relays to copy
// what the workers, all gone, last wrote.
func (s *Supervisor) waitAccessRelays() {
	done := make(chan struct{})
	go func() {
		s.accessRelays.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(accessRelaysWait):
		s.log.Warn("access log relays still running at exit; their last lines may be lost")
	}
}

// logOutputDropped is the lines the supervisor's log output dropped (0
// when it has no LogWriter).
func (s *Supervisor) logOutputDropped() uint64 {
	if s.opts.LogOutput == nil {
		return 0
	}
	return s.opts.LogOutput.Dropped()
}

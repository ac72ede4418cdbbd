package supervisor

import (
	"time"

	"github.com/gatehouse-dev/gatehouse/supervisor/logrelay"
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

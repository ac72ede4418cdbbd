package supervisor

import (
	"fmt"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/gatehouse-dev/gatehouse/proto"
	"golang.org/x/sys/unix"
)

// openAccessLog opens the access log of cfg for appending: its file, created
// 0640 when missing, or a duplicate of the supervisor's standard error. It
// returns -1 when the access log is off. The descriptor is close-on-exec;
// workers get duplicates of it over their channels, never by inheritance.
func openAccessLog(cfg config.Log) (int, error) {
	if !cfg.AccessLog {
		return -1, nil
	}
	if cfg.AccessLogPath == "" {
		fd, err := unix.FcntlInt(2, unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return -1, fmt.Errorf("access log: duplicating standard error: %w", err)
		}
		return fd, nil
	}
	fd, err := unix.Open(cfg.AccessLogPath, unix.O_WRONLY|unix.O_APPEND|unix.O_CREAT|unix.O_CLOEXEC|unix.O_NOCTTY, 0o640)
	if err != nil {
		return -1, fmt.Errorf("access log: opening %s: %w", cfg.AccessLogPath, err)
	}
	return fd, nil
}

// accessLogIsFile reports whether workers append the access log to a regular
// file (its file, or standard error redirected to one), which their
// sandbox's file size limit must then allow.
func accessLogIsFile(cfg *config.Config) bool {
	if !cfg.Log.AccessLog {
		return false
	}
	if cfg.Log.AccessLogPath != "" {
		return true
	}
	var st unix.Stat_t
	return unix.Fstat(2, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG
}

// ReopenAccessLog opens the access log again and gives the new descriptor to
// every worker (SIGUSR1, as nginx does after logrotate moved the file). Each
// worker writes what it buffered to the old descriptor before switching, so
// no line is lost. On error the workers keep writing where they were.
func (s *Supervisor) ReopenAccessLog() error {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	return s.reopenAccessLog()
}

// reopenAccessLog is ReopenAccessLog with reloadMu held.
// +checklocks:s.reloadMu
func (s *Supervisor) reopenAccessLog() error {
	fd, err := openAccessLog(s.accessLog)
	if err != nil {
		s.log.Error("reopening the access log; workers keep the previous one", "error", err)
		return err
	}
	s.post(accessLogMsg{fd: fd})
	return nil
}

// accessLogMsg hands the loop a freshly opened access log descriptor (-1:
// the access log is off), which the loop then owns.
type accessLogMsg struct{ fd int }

// setAccessLog makes fd the access log the loop hands to workers, closing the
// one it had, and sends it to every worker that has had its Hello.
func (d *dispatcher) setAccessLog(fd int) {
	if d.accessFD >= 0 {
		unix.Close(d.accessFD)
	}
	d.accessFD = fd
	if fd < 0 {
		return
	}
	for _, w := range d.workers {
		if w.ch != nil && w.spec.cfg.Log.AccessLog {
			d.sendAccessLog(w)
		}
	}
}

// sendAccessLog sends a worker a duplicate of the access log descriptor. A
// worker whose access log is on needs it before its first Dispatch: one that
// cannot be given it is stopped.
func (d *dispatcher) sendAccessLog(w *workerProc) {
	if d.accessFD < 0 {
		d.killWorker(w, "no access log descriptor to give it")
		return
	}
	dup, err := unix.FcntlInt(uintptr(d.accessFD), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		d.killWorker(w, fmt.Sprintf("duplicating the access log descriptor: %v", err))
		return
	}
	d.sendOwned(w, &proto.Frame{Body: &proto.Frame_AccessLog{AccessLog: &proto.AccessLog{}}}, dup)
}

package worker

import (
	"crypto/tls"
	"os"
	"sync"
	"time"

	"github.com/gatehouse-dev/gatehouse/proto"
	"golang.org/x/sys/unix"
)

// Affinity (docs/DESIGN.md §2.7): a kept-alive connection's descriptor stays
// here between rounds while the supervisor parks its own copy; the
// connection's next request comes back to this worker in a Dispatch without
// a descriptor. One owner at a time: a kept copy is never read or written
// while the connection is parked (the supervisor owns it then); it is used
// again only when a Dispatch names it, and closed when a Forget does.

// keptConn is a connection parked in the supervisor whose descriptor copy
// this worker keeps between rounds: a plain one, or a TLS one with its TLS
// state and the plaintext read ahead.
type keptConn struct {
	nc    *os.File  // a TLS connection's, under the poller; nil for a plain one
	fd    int       // a plain connection's copy is this bare descriptor
	tc    *tls.Conn // nil for a plain connection
	plain []byte    // TLS plaintext read ahead
	full  bool      // crypto/tls may hold more (deadlineReader.full)
	// state is the TLS state its requests were given (Request.TLS), or
	// nil if none was asked for yet.
	state *tls.ConnectionState
	id    uint64
	prev  *keptConn // older
	next  *keptConn // newer
}

// keptSet is the worker's kept connections, by id and oldest first. A plain
// connection is kept only under workers.max_kept_connections and is never
// dropped here on its own: the supervisor decides that (Forget, or a
// Dispatch without a descriptor takes it out), so a Dispatch that names it
// always finds it. Over workers.tls_max_idle_sessions the oldest TLS
// connection is closed (the supervisor sees it close; a Dispatch already on
// its way is answered with CLOSE).
type keptSet struct {
	mu           sync.Mutex
	byID         map[uint64]*keptConn // +checklocks:mu
	oldest, last *keptConn            // +checklocks:mu
	tls          int                  // TLS connections in byID; +checklocks:mu
	// evicted are the TLS connections closed over the cap that the
	// supervisor has not closed yet: it may dispatch one whose next record
	// waited for a slot before it saw the close. +checklocks:mu
	evicted map[uint64]struct{}
}

func (s *keptSet) unlink(k *keptConn) {
	if k.prev != nil {
		k.prev.next = k.next
	} else {
		s.oldest = k.next
	}
	if k.next != nil {
		k.next.prev = k.prev
	} else {
		s.last = k.prev
	}
	k.prev, k.next = nil, nil
	delete(s.byID, k.id)
	if k.tc != nil {
		s.tls--
	}
}

// keep parks k under id and reports whether it did: a plain connection is
// not kept at its cap (the caller closes its copy); a TLS one always is,
// and the oldest TLS connection over the TLS cap is closed with
// close_notify.
func (w *Worker) keep(id uint64, k *keptConn) bool {
	k.id = id
	s := &w.kept
	s.mu.Lock()
	if k.tc == nil && len(s.byID)-s.tls >= w.cfg.Workers.MaxKeptConnections {
		s.mu.Unlock()
		return false
	}
	if s.byID == nil {
		s.byID = make(map[uint64]*keptConn)
	}
	s.byID[id] = k
	k.prev = s.last
	if s.last != nil {
		s.last.next = k
	} else {
		s.oldest = k
	}
	s.last = k
	var evict *keptConn
	if k.tc != nil {
		if s.tls++; s.tls > w.cfg.Workers.TLSMaxIdleSessions {
			// Past at most max_kept_connections plain ones.
			for evict = s.oldest; evict.tc == nil; evict = evict.next {
			}
			s.unlink(evict)
			if s.evicted == nil {
				s.evicted = make(map[uint64]struct{})
			}
			s.evicted[evict.id] = struct{}{}
		}
	}
	s.mu.Unlock()
	if evict != nil {
		evict.nc.SetWriteDeadline(time.Now().Add(time.Second))
		evict.tc.CloseWrite()
		unix.Shutdown(evict.fd, unix.SHUT_RDWR)
		evict.nc.Close()
	}
	return true
}

// keepPlain keeps a duplicate of a plain connection's descriptor fd, outside
// the runtime's poller: a copy registered there would wake this worker at
// every byte the client sends while the supervisor owns the connection (an
// extra context switch per request, measured). It reports whether it did.
func (w *Worker) keepPlain(id uint64, fd int) bool {
	if w.cfg.Workers.MaxKeptConnections == 0 {
		// Off: no duplicate made and closed at each round.
		return false
	}
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return false
	}
	if !w.keep(id, &keptConn{fd: dup}) {
		unix.Close(dup)
		return false
	}
	return true
}

// unkeep takes back the kept connection id for a Dispatch without a
// descriptor, or returns nil.
func (w *Worker) unkeep(id uint64) *keptConn {
	w.kept.mu.Lock()
	defer w.kept.mu.Unlock()
	k := w.kept.byID[id]
	if k != nil {
		w.kept.unlink(k)
	}
	return k
}

// forget closes a kept connection the supervisor closed or moved (Forget).
// An id not kept (a TLS connection closed here already) is ignored. A
// retired worker exits once it keeps no TLS connection.
func (w *Worker) forget(id uint64) {
	if k := w.unkeep(id); k != nil {
		k.close()
	} else {
		w.wasEvicted(id)
	}
	w.exitIfDrained()
}

// wasEvicted reports whether id was closed over the TLS cap and not yet
// dispatched or forgotten, and forgets it.
func (w *Worker) wasEvicted(id uint64) bool {
	w.kept.mu.Lock()
	defer w.kept.mu.Unlock()
	_, ok := w.kept.evicted[id]
	delete(w.kept.evicted, id)
	return ok
}

// returnEvicted answers the Dispatch of a connection closed over the cap:
// Done with close, and the supervisor closes its copy.
func (w *Worker) returnEvicted(d *proto.Dispatch) {
	defer func() {
		w.serving.Add(-1)
		w.exitIfDrained()
	}()
	done := &proto.Frame{Body: &proto.Frame_Done{Done: &proto.Done{
		ConnId: d.GetConnId(), Disposition: proto.Disposition_CLOSE, Outcome: proto.Outcome_OK, Requests: d.GetRequests(),
	}}}
	if err := w.ch.Send(done, -1); err != nil {
		w.log.Error("returning connection", "conn", d.GetConnId(), "error", err)
	}
}

// close closes a kept connection the supervisor forgot. A TLS one ends
// with close_notify, bounded like an eviction's: when the supervisor closed
// the connection it has shut it down first, and the write fails at once;
// when an upgrade hands over, the connection is still up (docs/DESIGN.md
// §11) and the client learns that the close is clean.
func (k *keptConn) close() {
	if k.nc != nil {
		k.nc.SetWriteDeadline(time.Now().Add(time.Second))
		k.tc.CloseWrite()
		k.nc.Close()
		return
	}
	unix.Close(k.fd)
}

// keptCount is how many TLS connections the worker keeps: a retired worker
// serves them to their end (their state cannot move); plain ones move.
func (w *Worker) keptCount() int {
	w.kept.mu.Lock()
	defer w.kept.mu.Unlock()
	return w.kept.tls
}

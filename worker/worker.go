// Package worker is gatehouse's unprivileged process. It receives readable
// client connections from the supervisor over its channel (fd 3), serves one
// request round on each (or the pipelined requests already buffered), and
// hands every connection back. It holds no listener and dials nothing.
package worker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/gatehouse-dev/gatehouse/internal/memtrim"
	"github.com/gatehouse-dev/gatehouse/ipc"
	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/sandbox"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// channelFD is the descriptor the supervisor passes the channel as.
const channelFD = 3

// Worker serves the connections its supervisor dispatches. What it is
// told once, by Hello, is its setup; what changes while it runs, its
// lifecycle; the rest are the mechanisms the rounds share.
type Worker struct {
	log   hclog.Logger // its level is the last LogLevel's
	ch    *ipc.Stream
	roots map[string]*os.Root // document roots opened before the sandbox closed; immutable
	opts  Options             // immutable
	// testDispatchAge, set by a test before the worker runs, replaces
	// maxDispatchAge.
	testDispatchAge time.Duration

	// *setup is nil until Hello, then never changed.
	*setup
	lifecycle

	calls caller
	kept  keptSet // connections kept for affinity
	// hot holds the connections in a hot wait, for a pressure notice to
	// end.
	hotMu sync.Mutex
	hot   map[*connServer]struct{} // +checklocks:hotMu
	srv   servers                  // the server goroutines, from Hello on
	date  dateCache
}

// Options are what an embedding program adds to a worker.
type Options struct {
	// AuthorizeUpload, when set, may accept a request over max_body_bytes
	// on a route with max_upload_bytes, besides the configured tokens. It
	// sees the head only; it runs before any body byte is read.
	AuthorizeUpload func(*http.Request) bool
	// Handlers are the program's own handlers, served by routes with an
	// `embedded { name = "..." }` block.
	Handlers map[string]http.Handler
}

// Main is the entry point of `gatehouse worker`. args are the supervisor's
// sandbox policy (sandbox.Policy.Args). It returns the exit status.
func Main(args []string) int { return Run(args, Options{}) }

// Run is Main with an embedding program's options.
func Run(args []string, opts Options) int {
	log := hclog.New(&hclog.LoggerOptions{Name: "worker", JSONFormat: true, Output: os.Stderr, Level: hclog.Info})
	policy, err := sandbox.ParseArgs(args)
	if err != nil {
		log.Error("reading sandbox policy", "error", err)
		return 2
	}
	w := &Worker{log: log, opts: opts, roots: make(map[string]*os.Root)}
	// Document roots are opened before the sandbox closes; afterwards the
	// worker reaches files only through these descriptors. Roots passed as
	// descriptors are opened through them: the worker's account may not
	// search the directories above a root.
	var opened []string
	var openedFDs []int
	for i, path := range policy.Roots {
		name := path
		if len(policy.RootFDs) > 0 {
			name = fmt.Sprintf("/proc/self/fd/%d", policy.RootFDs[i])
		}
		r, err := os.OpenRoot(name)
		if err == nil && deleted(r) {
			// Handed over after it was removed: no file can appear
			// in it, and the kernel mounts no unlinked directory.
			r.Close()
			err = errors.New("the directory was removed")
		}
		if err != nil {
			// A root gone since the supervisor checked the configuration
			// costs its own routes a 503, not the worker: the sandbox is
			// built around the roots that opened.
			log.Error("document root unavailable; its routes answer 503", "root", path, "error", err)
			if len(policy.RootFDs) > 0 {
				unix.Close(policy.RootFDs[i])
			}
			continue
		}
		w.roots[path] = r
		opened = append(opened, path)
		if len(policy.RootFDs) > 0 {
			openedFDs = append(openedFDs, policy.RootFDs[i])
		}
	}
	policy = policy.WithRootFDs(opened, openedFDs)
	applied, err := sandbox.Apply(policy)
	// The passed descriptors served to bind the roots and to name them to
	// Landlock; the worker keeps only its own.
	for _, fd := range openedFDs {
		unix.Close(fd)
	}
	if err != nil {
		log.Error("sandbox not applied; refusing to serve", "error", err)
		return 1
	}
	if sandbox.RootsRebound(applied) {
		// The descriptors opened above point into the detached old root,
		// from which ".." climbs out: keep only the read-only binds.
		for path, old := range w.roots {
			r, err := os.OpenRoot(path)
			old.Close()
			if err != nil {
				log.Error("reopening document root in the sandbox", "root", path, "error", err)
				return 1
			}
			w.roots[path] = r
		}
	}
	var layers []*proto.SandboxLayer
	for _, l := range applied {
		layers = append(layers, &proto.SandboxLayer{Name: l.Name, Applied: l.Applied, Detail: l.Detail})
		if !l.Applied {
			log.Warn("sandbox layer not applied; running best-effort", "layer", l.Name, "detail", l.Detail)
		}
	}
	ch, err := ipc.NewStream(os.NewFile(channelFD, "ipc"))
	if err != nil {
		log.Error("opening channel", "error", err)
		return 1
	}
	w.ch = ch
	w.calls.ch = ch
	// A worker holds no connection between rounds: what a burst of rounds
	// left in the runtime goes back to the system once it is quiet.
	trim, stopTrim := context.WithCancel(context.Background())
	go memtrim.Run(trim, memtrim.Default, nil)
	err = w.run(layers)
	stopTrim()
	if w.setup != nil && w.access != nil {
		w.access.Flush()
	}
	if err != nil {
		log.Error("worker stopped", "error", err)
		return 1
	}
	return 0
}

// run reads frames until the channel closes or a drain completes. layers is
// the sandbox report sent in Ready.
func (w *Worker) run(layers []*proto.SandboxLayer) error {
	defer func() {
		if w.srv.jobs != nil {
			close(w.srv.jobs) // the server goroutines end
		}
	}()
	for {
		f := w.frame()
		fd, err := w.ch.Recv(f)
		if errors.Is(err, ipc.ErrClosed) || w.drained.Load() {
			// The supervisor is gone (nothing to hand connections back
			// to), or a drain completed.
			return nil
		}
		if err != nil {
			return err
		}
		switch b := f.Body.(type) {
		case *proto.Frame_Hello:
			if w.setup != nil {
				return errors.New("second Hello")
			}
			if err := w.hello(b.Hello); err != nil {
				return err
			}
			// What setting up left goes back before the first round, and
			// the collector's own code is paged in once, now.
			memtrim.Trim()
			ready := &proto.Frame{Body: &proto.Frame_Ready{Ready: &proto.Ready{Pid: uint32(os.Getpid()), Layers: layers, Threads: uint32(runtime.GOMAXPROCS(0))}}}
			if err := w.ch.Send(ready, -1); err != nil {
				return err
			}
		case *proto.Frame_Dispatch:
			// Counted before a kept connection leaves the kept set, so a
			// retired worker never sees itself idle in between.
			w.serving.Add(1)
			var k *keptConn
			switch {
			case w.setup == nil:
				closeFD(fd)
				return errors.New("Dispatch before Hello")
			case !b.Dispatch.GetHasFd():
				closeFD(fd)
				if k = w.unkeep(b.Dispatch.GetConnId()); k == nil {
					if !w.wasEvicted(b.Dispatch.GetConnId()) {
						return fmt.Errorf("Dispatch without a descriptor of connection %d, which is not kept", b.Dispatch.GetConnId())
					}
					go w.returnEvicted(b.Dispatch)
					continue
				}
			case fd < 0:
				return errors.New("Dispatch without a descriptor")
			}
			if w.access != nil && !w.access.Ready() {
				// The supervisor sends the access log right after Hello.
				closeFD(fd)
				return errors.New("Dispatch before the access log's descriptor")
			}
			if int(w.active.Load()) >= w.conc {
				closeFD(fd)
				return errors.New("Dispatch over the worker's concurrency")
			}
			w.active.Add(1)
			w.start(job{f: f, fd: fd, k: k})
		case *proto.Frame_Ping:
			// Sent from its own goroutine: this loop never blocks on a
			// send, so the supervisor's frames are always read.
			pong := &proto.Frame{Body: &proto.Frame_Pong{Pong: &proto.Pong{Seq: b.Ping.GetSeq(), Active: uint32(w.active.Load())}}}
			go w.ch.Send(pong, -1)
		case *proto.Frame_Forget:
			w.forget(b.Forget.GetConnId())
		case *proto.Frame_TicketKeys:
			if err := w.setup.setTicketKeys(b.TicketKeys.GetKeys()); err != nil {
				return err
			}
		case *proto.Frame_Reclaim:
			go w.reclaim(b.Reclaim.GetUpstream())
		case *proto.Frame_AccessLog:
			if w.setup == nil || w.access == nil {
				closeFD(fd)
				return errors.New("AccessLog before Hello or with the access log off")
			}
			w.access.SetOut(os.NewFile(uintptr(fd), "access log"))
		case *proto.Frame_Pressure:
			w.setPressure(b.Pressure.GetOn())
		case *proto.Frame_LogLevel:
			w.log.SetLevel(hclog.LevelFromString(b.LogLevel.GetLevel()))
		case *proto.Frame_Drain:
			// Finish the rounds in flight (their Done frames go out
			// first), then exit; replies to their requests still come in
			// through this loop meanwhile.
			w.retire.Store(b.Drain.GetRetire())
			w.draining.Store(true)
			w.exitIfDrained()
		default:
			// Every reply goes to its caller, by the role the schema
			// declares (ipc.Spec): a new reply type needs no case here.
			if ipc.SpecOf(f).Role == proto.Role_ROLE_REPLY {
				w.calls.deliver(reply{f: f, fd: fd})
				continue
			}
			closeFD(fd)
			return fmt.Errorf("unexpected frame %T", f.Body)
		}
	}
}

// exitIfDrained ends a draining worker once no dispatch is being served
// and, when retired, no TLS connection is kept: closing the channel ends
// run, and the process exits.
func (w *Worker) exitIfDrained() {
	if !w.draining.Load() || w.serving.Load() > 0 || w.retire.Load() && w.keptCount() > 0 {
		return
	}
	w.exitOnce.Do(func() {
		w.drained.Store(true)
		w.ch.Close()
	})
}

// drainCloses reports whether cs closes after its response because its
// worker drains: every connection at shutdown; once retired, only plain
// ones, as a TLS connection's state cannot move to another worker.
func (cs *connServer) drainCloses() bool {
	return cs.w.draining.Load() && !(cs.tls && cs.w.retire.Load())
}

// setPressure records the supervisor's pressure; when on, every hot wait
// ends at once and its connection goes back.
func (w *Worker) setPressure(on bool) {
	w.pressure.Store(on)
	if !on {
		return
	}
	w.hotMu.Lock()
	defer w.hotMu.Unlock()
	for cs := range w.hot {
		cs.nc.SetReadDeadline(time.Unix(1, 0))
	}
}

// maskClient returns the client key for the access log: whole, or masked to
// /24 (IPv4) or /48 (IPv6) when log_client_addresses is false.
func (w *Worker) maskClient(key string) string {
	if w.cfg.Log.ClientAddresses {
		return key
	}
	a, err := netip.ParseAddr(key)
	if err != nil {
		return "-"
	}
	bits := 48
	if a.Is4() {
		bits = 24
	}
	p, _ := a.Prefix(bits)
	return p.String()
}

// deleted reports whether r's directory was removed (no link left).
func deleted(r *os.Root) bool {
	fi, err := r.Stat(".")
	if err != nil {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Nlink == 0
}

// htpasswdOf returns Hello's htpasswd entries by file.
func htpasswdOf(files []*proto.HtpasswdFile) map[string][]config.HtpasswdUser {
	m := make(map[string][]config.HtpasswdUser, len(files))
	for _, f := range files {
		users := make([]config.HtpasswdUser, 0, len(f.GetUsers()))
		for _, u := range f.GetUsers() {
			users = append(users, config.HtpasswdUser{Name: u.GetName(), Hash: u.GetHash()})
		}
		m[f.GetFile()] = users
	}
	return m
}

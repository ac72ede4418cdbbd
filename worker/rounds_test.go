package worker

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/ipc"
	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/worker/transport"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// The round tests run a real Worker (its frame loop, rounds and handlers)
// over a socketpair, with the test as its supervisor, and real client
// connections on loopback handed over by descriptor.

const roundsConfig = `
listener "http" {
  address = "127.0.0.1:0"
}
workers {
  concurrency = 4
}
limits {
  max_body_bytes = 16
}
log {
  access_log = false
}
route "/" {
  respond {
    status = 200
    body   = "ok\n"
  }
}
`

// roundWait bounds every wait for the worker; only a broken worker reaches it.
const roundWait = 10 * time.Second

type roundHarness struct {
	t      *testing.T
	super  *ipc.Stream
	frames chan *proto.Frame
	nextID uint64
}

// startWorker runs a worker on roundsConfig and completes its Hello.
func startWorker(t *testing.T) *roundHarness {
	t.Helper()
	return startWorkerWith(t, roundsConfig, nil)
}

// startWorkerWith runs a worker on the configuration src, with the
// document roots a sandboxed worker would have opened, and completes its
// Hello.
func startWorkerWith(t *testing.T, src string, roots map[string]*os.Root) *roundHarness {
	t.Helper()
	return startWorkerOpts(t, src, roots, Options{})
}

// startWorkerOpts is startWorkerWith for a worker with an embedding
// program's options.
func startWorkerOpts(t *testing.T, src string, roots map[string]*os.Root, opts Options) *roundHarness {
	t.Helper()
	ws, ss := streamPair(t)
	w := &Worker{log: hclog.NewNullLogger(), roots: roots, opts: opts}
	w.ch, w.calls.ch = ws, ws
	stopped := make(chan error, 1)
	go func() { stopped <- w.run(nil) }()
	t.Cleanup(func() {
		ss.Close()
		select {
		case err := <-stopped:
			if err != nil {
				t.Errorf("worker: %v", err)
			}
		case <-time.After(roundWait):
			t.Error("worker did not stop when its channel closed")
		}
	})
	h := &roundHarness{t: t, super: ss, frames: make(chan *proto.Frame, 64)}
	go func() {
		defer close(h.frames)
		for {
			f := new(proto.Frame)
			fd, err := ss.Recv(f)
			if err != nil {
				return
			}
			if fd >= 0 {
				unix.Close(fd)
			}
			if f.GetBodyStart() != nil || f.GetBodyProgress() != nil || f.GetBodyDone() != nil {
				// As the supervisor does with room in the body budget.
				ss.Send(&proto.Frame{Id: f.GetId(), Body: &proto.Frame_BodyReply{BodyReply: &proto.BodyReply{Ok: true}}}, -1)
				continue
			}
			h.frames <- f
		}
	}()
	hello := &proto.Hello{Config: []byte(src), ConfigName: "rounds.hcl", Concurrency: 4}
	if err := ss.Send(&proto.Frame{Body: &proto.Frame_Hello{Hello: hello}}, -1); err != nil {
		t.Fatal(err)
	}
	if f := h.next(); f.GetReady() == nil {
		t.Fatalf("got %T after Hello, want Ready", f.Body)
	}
	return h
}

func (h *roundHarness) next() *proto.Frame {
	h.t.Helper()
	select {
	case f, ok := <-h.frames:
		if !ok {
			h.t.Fatal("worker closed its channel")
		}
		return f
	case <-time.After(roundWait):
		h.t.Fatal("no frame from the worker")
	}
	return nil
}

// client is one loopback connection: the client's end, and the descriptor
// the supervisor would keep for the server's end (non-blocking, as accepted).
type client struct {
	c  net.Conn
	br *bufio.Reader
	fd int
	id uint64
	// requests is the count the supervisor recorded from the last Done.
	requests uint32
}

func (h *roundHarness) connect() *client {
	h.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		h.t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		h.t.Fatal(err)
	}
	sc, err := ln.Accept()
	if err != nil {
		h.t.Fatal(err)
	}
	rc, err := sc.(*net.TCPConn).SyscallConn()
	if err != nil {
		h.t.Fatal(err)
	}
	fd := -1
	rc.Control(func(s uintptr) { fd, err = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) })
	sc.Close()
	if err != nil {
		h.t.Fatal(err)
	}
	h.nextID++
	cl := &client{c: c, br: bufio.NewReader(c), fd: fd, id: h.nextID}
	h.t.Cleanup(func() { c.Close(); unix.Close(fd) })
	return cl
}

// dispatch hands cl to the worker with carried input, and returns its Done.
func (h *roundHarness) dispatch(cl *client, carried []byte) *proto.Done {
	h.t.Helper()
	d := &proto.Dispatch{
		ConnId:           cl.id,
		HasFd:            true,
		Peer:             cl.c.LocalAddr().String(),
		ClientKey:        "127.0.0.1",
		Carried:          carried,
		Requests:         cl.requests,
		AcceptedUnixNano: time.Now().UnixNano(),
	}
	if err := h.super.Send(&proto.Frame{Body: &proto.Frame_Dispatch{Dispatch: d}}, cl.fd); err != nil {
		h.t.Fatal(err)
	}
	f := h.next()
	done := f.GetDone()
	if done == nil || done.GetConnId() != cl.id {
		h.t.Fatalf("got %v, want Done for connection %d", f, cl.id)
	}
	cl.requests = done.GetRequests()
	return done
}

func (cl *client) write(t *testing.T, s string) {
	t.Helper()
	if _, err := io.WriteString(cl.c, s); err != nil {
		t.Fatal(err)
	}
}

func (cl *client) response(t *testing.T) *http.Response {
	t.Helper()
	cl.c.SetReadDeadline(time.Now().Add(roundWait))
	r, err := http.ReadResponse(cl.br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, r.Body)
	r.Body.Close()
	return r
}

func get(path string) string { return "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n" }

// waitReadable waits until the client's request reached the server's socket,
// as the supervisor dispatches only a readable connection.
func waitReadable(t *testing.T, fd int) {
	t.Helper()
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	if n, err := transport.IgnoringEINTR(func() (int, error) { return unix.Poll(pfd, int(roundWait/time.Millisecond)) }); n != 1 || err != nil {
		t.Fatalf("connection not readable: %d %v", n, err)
	}
}

// connection is the response's Connection header; net/http takes "close"
// out of the header into Close.
func connection(r *http.Response) string {
	if r.Close {
		return "close"
	}
	return r.Header.Get("Connection")
}

// sameEnd reports whether got ends the connection as want does: LINGER is a
// close that discards the client's remaining input first.
func sameEnd(got, want proto.Disposition) bool {
	if want == proto.Disposition_CLOSE && got == proto.Disposition_LINGER {
		return true
	}
	return got == want
}

func TestRoundKeepAlive(t *testing.T) {
	h := startWorker(t)
	for _, tc := range []struct {
		name     string
		requests []string // one per dispatch
		disp     proto.Disposition
		conn     string // the last response's Connection header
	}{
		{"HTTP/1.1 kept alive", []string{get("/"), get("/")}, proto.Disposition_KEEP_ALIVE, "keep-alive"},
		{"Connection: close", []string{"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"}, proto.Disposition_CLOSE, "close"},
		{"HTTP/1.0 closes", []string{"GET / HTTP/1.0\r\n\r\n"}, proto.Disposition_CLOSE, "close"},
		{"HTTP/1.0 keep-alive", []string{"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"}, proto.Disposition_KEEP_ALIVE, "keep-alive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := h.connect()
			var done *proto.Done
			for i, req := range tc.requests {
				cl.write(t, req)
				waitReadable(t, cl.fd)
				done = h.dispatch(cl, nil)
				r := cl.response(t)
				if r.StatusCode != 200 {
					t.Fatalf("round %d: status %d", i, r.StatusCode)
				}
				if done.GetRequests() != uint32(i+1) {
					t.Fatalf("round %d: Done counts %d requests, want %d", i, done.GetRequests(), i+1)
				}
				if i == len(tc.requests)-1 && connection(r) != tc.conn {
					t.Errorf("Connection: %q, want %q", connection(r), tc.conn)
				}
				if tc.conn == "keep-alive" && !strings.HasPrefix(r.Header.Get("Keep-Alive"), "timeout=") {
					t.Errorf("Keep-Alive: %q, want timeout=N", r.Header.Get("Keep-Alive"))
				}
			}
			if !sameEnd(done.GetDisposition(), tc.disp) {
				t.Errorf("disposition %v, want %v", done.GetDisposition(), tc.disp)
			}
			if len(done.GetCarried()) != 0 {
				t.Errorf("carried %q, want nothing", done.GetCarried())
			}
		})
	}
}

// TestRoundCloseLingersOnlyOnInput: a response to a client that asked to
// close ends the connection at once (CLOSE) when nothing more came, or the
// client closed its side and left nothing; with input left unread the
// supervisor lingers (LINGER), so that closing sends no reset ahead of the
// response. carried: the request comes carried, so the round reads nothing
// from the socket and must look at it (a peek) to know it empty.
func TestRoundCloseLingersOnlyOnInput(t *testing.T) {
	h := startWorker(t)
	const closing = "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
	for _, tc := range []struct {
		name    string
		input   string
		carried bool
		shut    bool // the client shuts its side after the request
		want    proto.Disposition
	}{
		{"nothing after the request", closing, false, false, proto.Disposition_CLOSE},
		{"bytes after the request", closing + "GET / HTTP/1.1\r\n", false, false, proto.Disposition_LINGER},
		{"carried, nothing in the socket", closing, true, false, proto.Disposition_CLOSE},
		{"carried, the client closed its side", closing, true, true, proto.Disposition_CLOSE},
		{"the client closed its side", closing, false, true, proto.Disposition_CLOSE},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := h.connect()
			var carried []byte
			if tc.carried {
				carried = []byte(tc.input)
			} else {
				cl.write(t, tc.input)
			}
			if tc.shut {
				cl.c.(*net.TCPConn).CloseWrite()
			}
			if !tc.carried || tc.shut {
				waitReadable(t, cl.fd)
			}
			done := h.dispatch(cl, carried)
			if r := cl.response(t); r.StatusCode != 200 || connection(r) != "close" {
				t.Fatalf("status %d, Connection %q; want 200, close", r.StatusCode, connection(r))
			}
			if done.GetDisposition() != tc.want {
				t.Errorf("disposition %v, want %v", done.GetDisposition(), tc.want)
			}
		})
	}
}

// TestRoundSlowCloseLooks: a round that took longer than drainedFresh does
// not trust its read to say the socket is empty: bytes the client sent
// while the handler ran (after asking to close, which it may not) are
// found, and the supervisor lingers instead of resetting the response.
func TestRoundSlowCloseLooks(t *testing.T) {
	src := strings.Replace(roundsConfig, `route "/" {`, "route \"/slow\" {\n  embedded {\n    name = \"slow\"\n  }\n}\nroute \"/\" {", 1)
	sent := make(chan struct{})
	h := startWorkerOpts(t, src, nil, Options{Handlers: map[string]http.Handler{
		"slow": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-sent:
			case <-time.After(roundWait):
			}
			time.Sleep(10 * drainedFresh)
			io.WriteString(w, "slow\n")
		}),
	}})
	cl := h.connect()
	cl.write(t, "GET /slow HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	waitReadable(t, cl.fd)
	go func() {
		// Once the head has been read (the handler runs), more input.
		time.Sleep(5 * drainedFresh)
		io.WriteString(cl.c, "GET / HTTP/1.1\r\n")
		close(sent)
	}()
	done := h.dispatch(cl, nil)
	if r := cl.response(t); r.StatusCode != 200 {
		t.Fatalf("status %d", r.StatusCode)
	}
	if done.GetDisposition() != proto.Disposition_LINGER {
		t.Errorf("disposition %v, want LINGER: input came while the handler ran", done.GetDisposition())
	}
}

// TestRoundPipelining: requests already buffered are served in one dispatch,
// up to the fairness bound; the rest goes back as carried bytes, which the
// next dispatch serves first.
func TestRoundPipelining(t *testing.T) {
	h := startWorker(t)
	cl := h.connect()
	const n = pipelineRounds + 2
	cl.write(t, strings.Repeat(get("/"), n))
	// Everything written is at the socket before the first dispatch, so
	// the first round reads all of it.
	for buffered := 0; buffered < n*len(get("/")); {
		waitReadable(t, cl.fd)
		var err error
		if buffered, err = unix.IoctlGetInt(cl.fd, unix.SIOCINQ); err != nil {
			t.Fatal(err)
		}
	}
	done := h.dispatch(cl, nil)
	if done.GetRequests() != pipelineRounds || done.GetDisposition() != proto.Disposition_KEEP_ALIVE {
		t.Fatalf("first dispatch: %d requests, %v; want %d, KEEP_ALIVE", done.GetRequests(), done.GetDisposition(), pipelineRounds)
	}
	if want := strings.Repeat(get("/"), n-pipelineRounds); string(done.GetCarried()) != want {
		t.Fatalf("carried %q, want %q", done.GetCarried(), want)
	}
	done = h.dispatch(cl, done.GetCarried())
	if done.GetRequests() != n || len(done.GetCarried()) != 0 {
		t.Fatalf("second dispatch: %d requests, carried %q; want %d and nothing", done.GetRequests(), done.GetCarried(), n)
	}
	for i := 0; i < n; i++ {
		if r := cl.response(t); r.StatusCode != 200 {
			t.Fatalf("response %d: status %d", i, r.StatusCode)
		}
	}
}

// TestRoundCarriedOnly: a request carried in the Dispatch is served with
// nothing on the socket.
func TestRoundCarriedOnly(t *testing.T) {
	h := startWorker(t)
	cl := h.connect()
	done := h.dispatch(cl, []byte(get("/")))
	if done.GetRequests() != 1 || done.GetDisposition() != proto.Disposition_KEEP_ALIVE {
		t.Fatalf("%d requests, %v; want 1, KEEP_ALIVE", done.GetRequests(), done.GetDisposition())
	}
	if r := cl.response(t); r.StatusCode != 200 {
		t.Fatalf("status %d", r.StatusCode)
	}
}

// TestRoundLimits: requests over the head and body caps are answered with
// their status and the connection is closed; the 1000th request's response
// closes the connection.
func TestRoundLimits(t *testing.T) {
	h := startWorker(t)
	for _, tc := range []struct {
		name     string
		req      string
		previous uint32 // requests the connection served before
		status   int
		disp     proto.Disposition
	}{
		{"start line over 8 KiB", "GET /" + strings.Repeat("a", 9000) + " HTTP/1.1\r\nHost: x\r\n\r\n", 0, 414, proto.Disposition_CLOSE},
		{"header section over 32 KiB", "GET / HTTP/1.1\r\nHost: x\r\n" + strings.Repeat("X-A: "+strings.Repeat("b", 1000)+"\r\n", 40) + "\r\n", 0, 431, proto.Disposition_CLOSE},
		{"over 100 header lines", "GET / HTTP/1.1\r\nHost: x\r\n" + strings.Repeat("X-A: b\r\n", 101) + "\r\n", 0, 431, proto.Disposition_CLOSE},
		{"body over max_body_bytes", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 17\r\n\r\n" + strings.Repeat("c", 17), 0, 413, proto.Disposition_CLOSE},
		{"bad Content-Length", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1x\r\n\r\n", 0, 400, proto.Disposition_CLOSE},
		{"HTTP/2.0", "GET / HTTP/2.0\r\nHost: x\r\n\r\n", 0, 505, proto.Disposition_CLOSE},
		{"1000th request", get("/"), maxRequestsPerConn - 1, 200, proto.Disposition_CLOSE},
		{"body within max_body_bytes", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 16\r\n\r\n" + strings.Repeat("c", 16), 0, 200, proto.Disposition_KEEP_ALIVE},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := h.connect()
			cl.requests = tc.previous
			cl.write(t, tc.req)
			waitReadable(t, cl.fd)
			done := h.dispatch(cl, nil)
			r := cl.response(t)
			if r.StatusCode != tc.status {
				t.Errorf("status %d, want %d", r.StatusCode, tc.status)
			}
			if !sameEnd(done.GetDisposition(), tc.disp) {
				t.Errorf("disposition %v, want %v", done.GetDisposition(), tc.disp)
			}
			if tc.disp == proto.Disposition_CLOSE && connection(r) != "close" {
				t.Errorf("Connection: %q, want close", connection(r))
			}
		})
	}
}

// TestRoundTruncatedBody checks that a body cut short by the end of the
// connection is never taken for a complete one: the handler does not run
// (it would pass a short body on as if whole) and the round ends in 400.
func TestRoundTruncatedBody(t *testing.T) {
	h := startWorker(t)
	cl := h.connect()
	cl.write(t, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
	cl.c.(*net.TCPConn).CloseWrite()
	waitReadable(t, cl.fd)
	done := h.dispatch(cl, nil)
	if r := cl.response(t); r.StatusCode != http.StatusBadRequest {
		t.Errorf("status %d for a truncated body, want 400", r.StatusCode)
	}
	if done.GetDisposition() == proto.Disposition_KEEP_ALIVE {
		t.Errorf("disposition %v after a truncated body, want the connection closed", done.GetDisposition())
	}
}

package e2e

import (
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/ipc"
	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/supervisor/view"
	"github.com/gatehouse-dev/gatehouse/worker"
	"golang.org/x/sys/unix"
	pb "google.golang.org/protobuf/proto"
)

// hostileWorker is a test-only worker program: slot 0 breaks the protocol in
// the way its mode names; every other slot is a real worker. It peeks at
// Hello to learn its slot without consuming it. The first modes misbehave
// before they ever report Ready, so that no client is dispatched to them; the
// request modes (requestModes) report Ready first, since
// only a ready worker may send requests.
func hostileWorker(args []string) int {
	mode, rest := args[0], args[1:]
	buf := make([]byte, ipc.MaxFrameSize)
	n, _, _, _, err := unix.Recvmsg(3, buf, nil, unix.MSG_PEEK)
	if err != nil {
		return 1
	}
	var hello proto.Frame
	if pb.Unmarshal(buf[:n], &hello) != nil || hello.GetHello().GetWorkerId() != 0 {
		return worker.Main(rest)
	}
	unix.Recvmsg(3, buf, nil, 0) // consume Hello
	if run := requestModes[mode]; run != nil {
		return run()
	}
	send := func(b []byte, oob []byte) { unix.Sendmsg(3, b, oob, nil, 0) }
	switch mode {
	case "garbage":
		send([]byte("\xff\xff\xff\xff garbage that is no protobuf frame \x00\x01"), nil)
	case "oversize":
		send(make([]byte, ipc.MaxFrameSize+100), nil)
	case "descriptor":
		b, _ := pb.Marshal(&proto.Frame{Body: &proto.Frame_Pong{Pong: &proto.Pong{Seq: 1}}})
		send(b, unix.UnixRights(0))
	case "foreign-done":
		b, _ := pb.Marshal(&proto.Frame{Body: &proto.Frame_Done{Done: &proto.Done{ConnId: 424242, Disposition: proto.Disposition_KEEP_ALIVE}}})
		send(b, nil)
	case "empty":
		b, _ := pb.Marshal(&proto.Frame{Id: 7})
		send(b, nil)
	}
	// Wait to be killed; exit on our own only if the supervisor never does.
	time.Sleep(30 * time.Second)
	return 0
}

// A worker that sends a malformed, oversized or unexpected frame, or a
// descriptor, is killed and replaced, the supervisor stays up and the other
// worker's clients are served throughout.
func TestHostileWorkerIsKilled(t *testing.T) {
	for _, mode := range []string{"garbage", "oversize", "descriptor", "foreign-done", "empty"} {
		t.Run(mode, func(t *testing.T) {
			h := startHostile(t, mode)
			h.expectDeaths(1)
			// Killed before it served a request: respawn is throttled (a
			// minute), not retried at once.
			h.waitFor("the hostile worker to be killed and throttled", 20*time.Second, func(s view.Snapshot) bool {
				return s.Workers[0].Restarts >= 1 && s.Workers[0].Backoff == time.Minute
			})
			cl := newClient(t, "127.0.0.1", h.addr)
			for i := 0; i < 50; i++ {
				if resp, _, err := cl.get("/ok"); err != nil || resp.StatusCode != 200 {
					t.Fatalf("request %d: %v", i, err)
				}
			}
			s := h.snapshot()
			if s.Workers[1].Restarts != 0 {
				t.Errorf("the well-behaved worker was restarted %d times", s.Workers[1].Restarts)
			}
			if got := s.Counters["worker_kills"]; got != 1 {
				t.Errorf("worker_kills = %d, want 1", got)
			}
			if testing.Verbose() {
				t.Logf("log:\n%s", h.logs.String())
			}
			if !strings.Contains(h.logs.String(), "killing worker") {
				t.Errorf("no log line for the violation")
			}
		})
	}
}

// startHostile runs two workers of which slot 0 is hostile in mode, and
// waits for slot 1 to be ready.
func startHostile(t *testing.T, mode string) *harness {
	t.Helper()
	h := startNoWait(t, `
workers {
  count       = 2
  concurrency = 4
}
`, "hostile-worker", mode)
	h.waitFor("the well-behaved worker", 20*time.Second, func(s view.Snapshot) bool {
		return s.Workers[1].State == "ready"
	})
	return h
}

// Request modes of the hostile worker. Each reports Ready (a worker may send
// requests only once ready) and then sends worker requests over its channel
// in the way its name says. They report what they saw on stderr, which the
// supervisor relays into its log, as lines starting with "hostile:".
var requestModes = map[string]func() int{
	// A Dial with a descriptor attached: only a Dispatch carries one.
	"request-descriptor": func() int {
		return violate(&proto.Frame{Id: 1, Body: &proto.Frame_Dial{Dial: &proto.Dial{Upstream: hostileUpstream}}}, unix.UnixRights(0))
	},
	// A Dial for a name no upstream block defines.
	"unknown-upstream": func() int {
		return violate(&proto.Frame{Id: 1, Body: &proto.Frame_Dial{Dial: &proto.Dial{Upstream: "nowhere"}}}, nil)
	},
	// An UpstreamRelease for an upstream it holds no connection to.
	"release-unheld": func() int {
		return violate(&proto.Frame{Body: &proto.Frame_UpstreamRelease{UpstreamRelease: &proto.UpstreamRelease{Upstream: hostileUpstream}}}, nil)
	},
	// A Reclaimed the supervisor never asked for.
	"reclaimed-unasked": func() int {
		return violate(&proto.Frame{Body: &proto.Frame_Reclaimed{Reclaimed: &proto.Reclaimed{Upstream: hostileUpstream}}}, nil)
	},
	// A RateCheck for a connection it was never dispatched.
	"ratecheck-foreign": func() int {
		return violate(&proto.Frame{Id: 1, Body: &proto.Frame_RateCheck{RateCheck: &proto.RateCheck{ConnId: 424242, Class: hostileClass}}}, nil)
	},
	// A Dial before Ready.
	"request-before-ready": func() int {
		b, _ := pb.Marshal(&proto.Frame{Id: 1, Body: &proto.Frame_Dial{Dial: &proto.Dial{Upstream: hostileUpstream}}})
		unix.Sendmsg(3, b, nil, nil, 0)
		time.Sleep(30 * time.Second)
		return 0
	},
	"flood": floodWorker,
	"lanes": lanesWorker,
	"loud":  loudWorker,
	// A Ready whose sandbox layer names hold control bytes.
	"forged-layers": forgedLayersWorker,
	// Keeps a dup() of every client descriptor and writes into it later.
	"dup-keeper":   dupKeeperWorker,
	"release-keep": releaseKeepWorker,
	"hoard":        hoardWorker,
	// Claims to keep every connection it serves, keeping none.
	"kept-liar": keptLiarWorker,
	// Clears O_NONBLOCK on the connections it hands back.
	"nonblock-clearer": nonblockClearerWorker,
}

// The names the request modes use; the tests configure them.
const (
	hostileUpstream = "app"
	hostileClass    = "login"
)

// readyFrame is what a hostile worker reports: no sandbox layers.
func readyFrame() []byte {
	b, _ := pb.Marshal(&proto.Frame{Body: &proto.Frame_Ready{Ready: &proto.Ready{Pid: uint32(os.Getpid())}}})
	return b
}

// violate reports Ready and at once sends f with oob, then waits to be
// killed. Both datagrams are queued before the supervisor reads either, as a
// rule, so no client is dispatched to this worker in between.
func violate(f *proto.Frame, oob []byte) int {
	b, _ := pb.Marshal(f)
	unix.Sendmsg(3, readyFrame(), nil, nil, 0)
	unix.Sendmsg(3, b, oob, nil, 0)
	time.Sleep(30 * time.Second)
	return 0
}

// hostileChannel wraps fd 3, whose Hello was consumed, and reports Ready.
func hostileChannel() *ipc.Stream {
	ch, err := ipc.NewStream(os.NewFile(3, "ipc"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "hostile: channel:", err)
		os.Exit(1)
	}
	if err := ch.Send(&proto.Frame{Body: &proto.Frame_Ready{Ready: &proto.Ready{Pid: uint32(os.Getpid())}}}, -1); err != nil {
		fmt.Fprintln(os.Stderr, "hostile: sending Ready:", err)
		os.Exit(1)
	}
	return ch
}

// Flood parameters, shared with TestHostileWorkerFlood.
const (
	floodRequests = 100000
	// floodRead is the signal that ends the flooding worker's stall: the
	// test sends it once it saw what must happen while the worker reads
	// nothing.
	floodRead = syscall.SIGUSR1
	// floodStallMax bounds the stall without the signal, below the
	// supervisor's 10 s ping timeout (the stalled worker answers no ping).
	floodStallMax = 8 * time.Second
)

// floodWorker sends floodRequests Dials for hostileUpstream from one
// goroutine without waiting for a reply; until floodRead (at most
// floodStallMax) it reads nothing at all, neither replies nor pings, then
// it reads and counts every reply. It serves a client it is dispatched
// with a canned response, answers pings and exits on Drain.
func floodWorker() int {
	read := make(chan os.Signal, 1)
	signal.Notify(read, floodRead)
	ch := hostileChannel()
	fmt.Fprintln(os.Stderr, "hostile: flood started")
	var sent atomic.Int64
	go func() {
		for i := 1; i <= floodRequests; i++ {
			f := &proto.Frame{Id: uint64(i), Body: &proto.Frame_Dial{Dial: &proto.Dial{Upstream: hostileUpstream}}}
			if err := ch.Send(f, -1); err != nil {
				fmt.Fprintf(os.Stderr, "hostile: flood send %d: %v\n", i, err)
				return
			}
			sent.Add(1)
		}
	}()
	signaled := false
	select {
	case <-read:
		signaled = true
	case <-time.After(floodStallMax):
	}
	fmt.Fprintf(os.Stderr, "hostile: flood reading sent=%d signaled=%v\n", sent.Load(), signaled)
	seen := make([]bool, floodRequests+1)
	var overloaded, dials, timedOut, refused, ok, strange int
	reported := false
	for {
		var f proto.Frame
		fd, err := ch.Recv(&f)
		if err != nil {
			return 0 // the supervisor closed the channel
		}
		switch b := f.Body.(type) {
		case *proto.Frame_Overloaded, *proto.Frame_DialReply:
			id := f.GetId()
			if id == 0 || id > floodRequests || seen[id] {
				strange++
				break
			}
			seen[id] = true
			if _, over := b.(*proto.Frame_Overloaded); over {
				overloaded++
				break
			}
			dials++
			r := f.GetDialReply()
			switch {
			case r.GetOk():
				ok++
			case r.GetRefused():
				refused++
			case r.GetTimedOut():
				timedOut++
			}
		case *proto.Frame_Ping:
			go ch.Send(&proto.Frame{Body: &proto.Frame_Pong{Pong: &proto.Pong{Seq: b.Ping.GetSeq()}}}, -1)
		case *proto.Frame_Dispatch:
			go serveCanned(ch, b.Dispatch, fd)
			fd = -1
		case *proto.Frame_Pressure:
			// A notice of the dispatcher's pressure, not a reply.
		case *proto.Frame_Drain:
			return 0
		default:
			strange++
		}
		if fd >= 0 {
			unix.Close(fd)
		}
		if !reported && overloaded+dials+strange >= floodRequests {
			reported = true
			fmt.Fprintf(os.Stderr, "hostile: flood done overloaded=%d dials=%d timed_out=%d refused=%d ok=%d strange=%d\n",
				overloaded, dials, timedOut, refused, ok, strange)
		}
	}
}

// cannedBody is what a hostile worker answers a client it is dispatched.
const cannedBody = "hostile\n"

// serveCanned answers one dispatched connection's request with a canned 200
// and returns it with LINGER, so that a client loop is not stranded at a
// hostile worker that was dispatched to.
func serveCanned(ch *ipc.Stream, d *proto.Dispatch, fd int) {
	f := os.NewFile(uintptr(fd), "client")
	c, err := net.FileConn(f)
	f.Close()
	if err == nil {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		head := string(d.GetCarried())
		buf := make([]byte, 4096)
		for !strings.Contains(head, "\r\n\r\n") {
			n, err := c.Read(buf)
			if err != nil {
				break
			}
			head += string(buf[:n])
		}
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(cannedBody), cannedBody)
		c.(*net.TCPConn).CloseWrite()
		c.Close()
	}
	ch.Send(&proto.Frame{Body: &proto.Frame_Done{Done: &proto.Done{
		ConnId:         d.GetConnId(),
		Disposition:    proto.Disposition_LINGER,
		Requests:       d.GetRequests() + 1,
		ResponseStatus: []uint32{200},
		ResponseMicros: []uint64{0},
	}}}, -1)
}

// Admission reproducer parameters, shared with TestAdmissionLanes: exactly
// cap lanes, each strictly sequential, lanesRequests in all.
const (
	lanesCap      = 64
	lanesRequests = 10000
)

// lanesWorker runs lanesCap lanes over its one channel. Each lane sends a
// Dial for hostileUpstream, waits for its reply, closes the descriptor,
// sends UpstreamRelease and only then sends its next Dial. At most lanesCap
// requests are ever outstanding, so none may be refused as Overloaded
// (docs/DESIGN.md §2.6, §4.2).
func lanesWorker() int {
	ch := hostileChannel()
	var mu sync.Mutex
	pending := make(map[uint64]chan *proto.Frame)
	go func() {
		for {
			var f proto.Frame
			fd, err := ch.Recv(&f)
			if err != nil {
				os.Exit(0) // the supervisor closed the channel
			}
			switch b := f.Body.(type) {
			case *proto.Frame_Overloaded, *proto.Frame_DialReply:
				if fd >= 0 {
					unix.Close(fd) // a lane needs only to know it got one
				}
				mu.Lock()
				c := pending[f.GetId()]
				delete(pending, f.GetId())
				mu.Unlock()
				if c == nil {
					fmt.Fprintf(os.Stderr, "hostile: lanes: reply to unknown id %d\n", f.GetId())
					continue
				}
				c <- &f
			case *proto.Frame_Ping:
				go ch.Send(&proto.Frame{Body: &proto.Frame_Pong{Pong: &proto.Pong{Seq: b.Ping.GetSeq()}}}, -1)
			case *proto.Frame_Dispatch:
				go serveCanned(ch, b.Dispatch, fd)
			case *proto.Frame_Drain:
				os.Exit(0)
			default:
				if fd >= 0 {
					unix.Close(fd)
				}
			}
		}
	}()
	var next, issued, overloaded, ok, failed atomic.Int64
	firstOverload := make([]int64, lanesCap) // per lane: index of its first Overloaded, or -1
	var wg sync.WaitGroup
	start := time.Now()
	for lane := 0; lane < lanesCap; lane++ {
		firstOverload[lane] = -1
		wg.Add(1)
		go func() {
			defer wg.Done()
			reply := make(chan *proto.Frame, 1)
			for n := int64(0); issued.Add(1) <= lanesRequests; n++ {
				id := uint64(next.Add(1))
				mu.Lock()
				pending[id] = reply
				mu.Unlock()
				if err := ch.Send(&proto.Frame{Id: id, Body: &proto.Frame_Dial{Dial: &proto.Dial{Upstream: hostileUpstream}}}, -1); err != nil {
					fmt.Fprintf(os.Stderr, "hostile: lanes: send: %v\n", err)
					os.Exit(1)
				}
				f := <-reply
				switch {
				case f.GetOverloaded() != nil:
					overloaded.Add(1)
					if firstOverload[lane] < 0 {
						firstOverload[lane] = n
					}
				case f.GetDialReply().GetOk():
					ok.Add(1)
					// The descriptor was closed on arrival; give the
					// connection back before the next request.
					ch.Send(&proto.Frame{Body: &proto.Frame_UpstreamRelease{UpstreamRelease: &proto.UpstreamRelease{
						Upstream: hostileUpstream, Conn: f.GetDialReply().GetConn()}}}, -1)
				default:
					failed.Add(1)
					fmt.Fprintf(os.Stderr, "hostile: lanes: dial failed: %v\n", f.GetDialReply())
				}
			}
		}()
	}
	wg.Wait()
	fmt.Fprintf(os.Stderr, "hostile: lanes done overloaded=%d ok=%d failed=%d elapsed_ms=%d first_overload=%v\n",
		overloaded.Load(), ok.Load(), failed.Load(), time.Since(start).Milliseconds(), firstOverload)
	select {} // serve pings until drained or killed
}

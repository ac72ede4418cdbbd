package supervisor

import (
	"fmt"
	"net"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/ipc"
	"github.com/gatehouse-dev/gatehouse/proto"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// FuzzHostileWorker runs the real loop over fake workers (issue 27: a worker
// is an adversary). Worker 0 is hostile: the fuzzer's program makes it send
// any frame (every kind a worker may send, and the supervisor's own), with
// any id (0 included), naming its own connections, another worker's, closed
// ones and ones never seen, with or without a descriptor, in any order; the
// other workers (worker 1, and any respawned one) are honest. Clients come,
// send requests and leave; the clock moves. After every step the loop's
// invariants hold (invariants_test.go), and at the end the loop still serves
// a new client through an honest worker, which was never killed.
//
// A program is a list of steps, one opcode byte each followed by its
// operands (a missing byte reads as 0):
//
//	0..11  the hostile worker sends the frame hostileOps[op] (Ready ..
//	       Sign): id, conn, fd, a, b, c; BodyStart's with b odd sends
//	       BodyProgress instead (an opcode of its own would change what
//	       the committed corpus means)
//	12     the hostile worker sends another frame: which, fd; which under
//	       192 picks one of six of the supervisor's, which from 192 any
//	       frame of the schema hostileOps does not name, built from its
//	       fields (then id, conn, a, b, c), so that a new frame is sent
//	       without an opcode of its own
//	13     an honest worker returns a connection: which, disposition
//	14     a client acts: which, what (request, new connection, close);
//	       a new connection's request asks to close when which >= 128
//	15     the clock moves on: tenths of a second, under 5 s
//
// The committed corpus (testdata/fuzz/FuzzHostileWorker) reproduces what
// issue 27 found: bodydone-id0-twice (BodyStart, a new client takes the
// freed pool slot, BodyDone with id 0 twice, no_worker_timeout passes: the
// loop panicked), bodydone-id0-then-done, streamstart-then-bodystart,
// ratecheck-foreign-key (RateChecks naming client keys of the worker's
// choosing on a trusted proxy's connections), and two more violations;
// bodyprogress-over-budget grows two bodies' charges until the second is
// refused, then reports a smaller count.
func FuzzHostileWorker(f *testing.F) {
	f.Fuzz(func(t *testing.T, prog []byte) {
		if len(prog) > 512 {
			prog = prog[:512]
		}
		newHostileRun(t).run(prog)
	})
}

// hostileConfig: two workers of two slots (a pool of 4, a share of 1),
// tight body (2 connections, 1 MiB) and stream budgets, a rate limit
// class, a trusted proxy (127.0.0.9) and an upstream at up.
func hostileConfig(up string) string {
	return baseConfig(2, 2, fmt.Sprintf(`
trusted_proxies = ["127.0.0.9"]
rate_limit "login" {
  prefix = "/login"
  rate   = 1
  per    = "60s"
  burst  = 1
}
streams {
  max        = 2
  per_client = 1
}
limits {
  body_buffer_connections = 2
  body_buffer_bytes = 1048576
  ipc_max_in_flight_requests = 4
}
upstream "up" {
  addresses       = [%q]
  max_connections = 2
}
`, up))
}

// fakeState is what the test knows of one fake worker: the connections it
// was dispatched (by id, with their request count) and the upstream
// connections it was given.
type fakeState struct {
	p       *fakeProc
	held    map[uint64]uint32
	peers   map[uint64]string // the peer of each dispatched connection
	upConns []uint64
	lastID  uint64
	honest  bool
	dead    bool
}

type hostileRun struct {
	t       *testing.T
	h       *loopHarness
	fakes   []*fakeState
	seen    []uint64 // every connection id dispatched, closed or not
	clients []*net.TCPConn
	nextIP  int
	prog    []byte
	pc      int
}

func newHostileRun(t *testing.T) *hostileRun {
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { up.Close() })
	r := &hostileRun{t: t, h: startLoop(t, hostileConfig(up.Addr().String())), nextIP: 2}
	for i, p := range r.h.workers {
		r.fakes = append(r.fakes, &fakeState{p: p, held: map[uint64]uint32{}, honest: i > 0})
	}
	// One connection per worker slot, from four clients (127.0.0.9, the
	// trusted proxy, among them).
	for _, ip := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.9"} {
		c := r.h.dial(ip)
		r.clients = append(r.clients, c)
		r.request(c, ip == "127.0.0.9")
		r.placed(c, true)
	}
	r.drain()
	return r
}

// request sends a request head on c (naming a forwarded client when fwd).
func (r *hostileRun) request(c *net.TCPConn, fwd bool) {
	head := "GET /login HTTP/1.1\r\nHost: x\r\n\r\n"
	if fwd {
		head = "GET /login HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 198.51.100.7\r\n\r\n"
	}
	c.Write([]byte(head))
}

// placed waits until the loop has taken c's request: c is at a worker,
// waiting, lingering, or closed. A new connection (fresh) must first be
// accepted; one refused (closed at once) is given up on after a bound.
func (r *hostileRun) placed(c *net.TCPConn, fresh bool) {
	local := c.LocalAddr().(*net.TCPAddr).AddrPort()
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
		found, taken := false, true
		r.h.inLoop(func(d *dispatcher) {
			for x := range d.conns.all() {
				if x.peer.addrPort() != local {
					continue
				}
				found = true
				if x.state != stateWaiting && x.state != stateAtWorker && x.state != stateLinger {
					taken = false
				}
			}
		})
		if taken && (found || !fresh) {
			return
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// drain takes what each fake received: dispatched connections (their
// descriptors consumed), upstream connections, and respawned workers, which
// report Ready and serve honestly.
func (r *hostileRun) drain() {
	for {
		select {
		case p := <-r.h.spawned:
			if f, err := p.Next(frameWait); err != nil || f.GetHello() == nil {
				r.t.Fatalf("a respawned worker got %v (%v), want Hello", f.Frame, err)
			}
			p.Ready()
			r.fakes = append(r.fakes, &fakeState{p: p, held: map[uint64]uint32{}, honest: true})
			continue
		default:
		}
		break
	}
	for _, fs := range r.fakes {
		for {
			f, ok := fs.p.TryNext()
			if !ok {
				break
			}
			if d := f.GetDispatch(); d != nil {
				fs.held[d.GetConnId()] = d.GetRequests()
				if fs.peers == nil {
					fs.peers = map[uint64]string{}
				}
				fs.peers[d.GetConnId()] = d.GetPeer()
				if !slices.Contains(r.seen, d.GetConnId()) {
					r.seen = append(r.seen, d.GetConnId())
				}
			}
			if dr := f.GetDialReply(); dr != nil && dr.GetOk() {
				fs.upConns = append(fs.upConns, dr.GetConn())
			}
			if f.FD >= 0 {
				consume(f.FD)
			}
		}
		select {
		case <-fs.p.Exited():
			if !fs.dead {
				fs.dead = true
				fs.held = map[uint64]uint32{}
			}
		default:
		}
	}
}

// settle waits until the loop has read every frame the fakes sent, then
// checks the invariants.
func (r *hostileRun) settle() {
	for deadline := time.Now().Add(frameWait); ; {
		pending := false
		r.h.inLoop(func(d *dispatcher) {
			var b [1]byte
			for _, w := range d.workers {
				if w.ch == nil {
					continue
				}
				if _, _, err := unix.Recvfrom(w.ch.FD(), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT); err != unix.EAGAIN {
					pending = true
				}
			}
		})
		if !pending {
			break
		}
		if time.Now().After(deadline) {
			r.t.Fatal("the loop did not read the frames sent to it")
		}
		time.Sleep(100 * time.Microsecond)
	}
	r.drain()
	r.h.checkInvariants()
	// Every key charged is a client's address or the one client the
	// trusted proxy's heads name, never one the worker named.
	r.h.inLoop(func(d *dispatcher) {
		for _, k := range d.limiter.Clients() {
			if a := k.As4(); a != [4]byte{198, 51, 100, 7} && a[0] != 127 {
				r.t.Errorf("the limiter charged %v, a key no head named", k)
			}
		}
	})
}

func (r *hostileRun) byte() byte {
	if r.pc >= len(r.prog) {
		r.pc++
		return 0
	}
	b := r.prog[r.pc]
	r.pc++
	return b
}

// pick returns an element of s chosen by b, or 0 for none.
func pick(s []uint64, b byte) uint64 {
	if len(s) == 0 {
		return 0
	}
	return s[int(b)%len(s)]
}

func heldIDs(fs *fakeState) []uint64 {
	ids := make([]uint64, 0, len(fs.held))
	for id := range fs.held {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// connID names a connection for the hostile worker: its own, an honest
// worker's, one seen before (perhaps closed), one never seen, or 0.
func (r *hostileRun) connID(b byte) uint64 {
	switch b % 5 {
	case 0:
		return pick(heldIDs(r.fakes[0]), b/5)
	case 1:
		var other []uint64
		for _, fs := range r.fakes[1:] {
			other = append(other, heldIDs(fs)...)
		}
		return pick(other, b/5)
	case 2:
		return pick(r.seen, b/5)
	case 3:
		return uint64(b)<<20 | 7
	}
	return 0
}

// frameID is a request id: 0, a small one, the last one again, or a large one.
func (r *hostileRun) frameID(b byte) uint64 {
	fs := r.fakes[0]
	switch b % 4 {
	case 0:
		return 0
	case 1:
		fs.lastID = uint64(b/4) + 1
	case 2:
		// the last id again
	case 3:
		fs.lastID = 1<<63 | uint64(b)
	}
	return fs.lastID
}

// hostileOps are the frames of opcodes 0..11, in the order of the frame
// table's rows when the corpus was written: the committed corpus depends on
// it, so it never changes (a new frame is reached through opcode 12).
var hostileOps = [12]string{"Ready", "Done", "Pong", "Dial", "RateCheck", "StatsRequest",
	"UpstreamRelease", "Reclaimed", "BodyStart", "BodyDone", "StreamStart", "Sign"}

// hostileFrame builds the frame named from the next operands.
func (r *hostileRun) hostileFrame(name string) (*proto.Frame, bool) {
	id, conn, fd := r.frameID(r.byte()), r.connID(r.byte()), r.byte()%4 == 3
	a, b, c := r.byte(), r.byte(), r.byte()
	f := &proto.Frame{Id: id}
	switch name {
	case "Ready":
		f.Body = &proto.Frame_Ready{Ready: &proto.Ready{Threads: uint32(a)}}
	case "Done":
		fs := r.fakes[0]
		m := &proto.Done{ConnId: conn, Requests: fs.held[conn] + uint32(a%3), Disposition: proto.Disposition(b % 4),
			Outcome: proto.Outcome(int32(c%7) - 1), Kept: c&8 != 0, Pending: c&16 != 0, Handback: proto.Handback(c >> 5)}
		if a&4 != 0 {
			m.Carried = []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		}
		if a&8 != 0 {
			m.ResponseStatus, m.ResponseMicros = []uint32{200}, []uint64{1}
		}
		f.Body = &proto.Frame_Done{Done: m}
	case "Pong":
		f.Body = &proto.Frame_Pong{Pong: &proto.Pong{Seq: uint64(a)}}
	case "Dial":
		name := "up"
		if a%3 == 0 {
			name = "nowhere"
		}
		f.Body = &proto.Frame_Dial{Dial: &proto.Dial{Upstream: name}}
	case "RateCheck":
		class := "login"
		if a%3 == 0 {
			class = "other"
		}
		// It names a client of its choosing too (RateCheck's old field 3).
		f = rateCheckNaming(id, conn, class, fmt.Sprintf("203.0.113.%d", b))
	case "StatsRequest":
		f.Body = &proto.Frame_StatsRequest{StatsRequest: &proto.StatsRequest{}}
	case "UpstreamRelease":
		up := pick(r.fakes[0].upConns, a)
		if b%3 == 0 {
			up = uint64(b)
		}
		f.Body = &proto.Frame_UpstreamRelease{UpstreamRelease: &proto.UpstreamRelease{Upstream: "up", Conn: up}}
	case "Reclaimed":
		f.Body = &proto.Frame_Reclaimed{Reclaimed: &proto.Reclaimed{Upstream: "up"}}
	case "BodyStart":
		// Lengths and counts from negative to far over max_body_bytes.
		n := (int64(a) - 8) << (c % 32)
		if b%2 == 1 {
			f.Body = &proto.Frame_BodyProgress{BodyProgress: &proto.BodyProgress{ConnId: conn, Received: n}}
			break
		}
		f.Body = &proto.Frame_BodyStart{BodyStart: &proto.BodyStart{ConnId: conn, Length: n}}
	case "BodyDone":
		f.Body = &proto.Frame_BodyDone{BodyDone: &proto.BodyDone{ConnId: conn}}
	case "StreamStart":
		f.Body = &proto.Frame_StreamStart{StreamStart: &proto.StreamStart{ConnId: conn, Upgrade: a&1 != 0}}
	case "Sign":
		// No listener here is TLS: every Sign is for a connection in no
		// handshake, or none the worker holds.
		f.Body = &proto.Frame_Sign{Sign: &proto.Sign{ConnId: conn, KeyId: uint32(a), Hash: uint32(b), Digest: make([]byte, c%80)}}
	default:
		f = anyFrame(ipc.SpecNamed(name), id, conn, a, b, c)
	}
	return f, fd
}

// anyFrame builds a frame of s from its body's scalar fields: conn_id is
// conn, each other number a, b or c in turn, a bool a bit of c, a string
// "up" or one no configuration names, bytes up to 79 of them.
func anyFrame(s *ipc.Spec, id, conn uint64, a, b, c byte) *proto.Frame {
	f := s.New()
	f.Id = id
	m := s.Body(f)
	ops := []byte{a, b, c}
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if fd.IsList() || fd.IsMap() {
			continue
		}
		n := ops[i%3]
		var v protoreflect.Value
		switch fd.Kind() {
		case protoreflect.BoolKind:
			v = protoreflect.ValueOfBool(c>>(i%8)&1 != 0)
		case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
			v = protoreflect.ValueOfUint64(uint64(n))
			if fd.Name() == "conn_id" {
				v = protoreflect.ValueOfUint64(conn)
			}
		case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
			v = protoreflect.ValueOfUint32(uint32(n))
		case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
			v = protoreflect.ValueOfInt64((int64(n) - 8) << (c % 32))
		case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
			v = protoreflect.ValueOfInt32(int32(n) - 8)
		case protoreflect.EnumKind:
			v = protoreflect.ValueOfEnum(protoreflect.EnumNumber(int32(n%8) - 1))
		case protoreflect.StringKind:
			v = protoreflect.ValueOfString(map[bool]string{true: "up", false: "nowhere"}[n%3 != 0])
		case protoreflect.BytesKind:
			v = protoreflect.ValueOfBytes(make([]byte, n%80))
		default:
			continue
		}
		m.Set(fd, v)
	}
	return f
}

// otherFrames are the frames of the schema that hostileOps does not name,
// which opcode 12 reaches from which 192.
var otherFrames = func() (other []*ipc.Spec) {
	for _, s := range ipc.Specs() {
		if !slices.Contains(hostileOps[:], s.Name) {
			other = append(other, s)
		}
	}
	return other
}()

// otherFrame is one of the frames only the supervisor sends, or one of
// otherFrames.
func (r *hostileRun) otherFrame() (*proto.Frame, bool) {
	which, fd := r.byte(), r.byte()%2 == 1
	if which >= 192 {
		s := otherFrames[int(which-192)%len(otherFrames)]
		id, conn := r.frameID(r.byte()), r.connID(r.byte())
		a, b, c := r.byte(), r.byte(), r.byte()
		return anyFrame(s, id, conn, a, b, c), fd
	}
	var f *proto.Frame
	switch which % 6 {
	case 0:
		f = &proto.Frame{Body: &proto.Frame_Hello{Hello: &proto.Hello{}}}
	case 1:
		f = &proto.Frame{Body: &proto.Frame_Dispatch{Dispatch: &proto.Dispatch{ConnId: 1, HasFd: true}}}
	case 2:
		f = &proto.Frame{Body: &proto.Frame_DialReply{DialReply: &proto.DialReply{Ok: true}}}
	case 3:
		f = &proto.Frame{Body: &proto.Frame_AccessLog{AccessLog: &proto.AccessLog{}}}
	case 4:
		f = &proto.Frame{Id: 3, Body: &proto.Frame_Overloaded{Overloaded: &proto.Overloaded{}}}
	default:
		f = &proto.Frame{Body: &proto.Frame_Forget{Forget: &proto.Forget{ConnId: 1}}}
	}
	return f, fd
}

// sendHostile sends f from the hostile worker, with a descriptor when fd.
func (r *hostileRun) sendHostile(f *proto.Frame, fd bool) {
	fs := r.fakes[0]
	if fs.dead {
		return
	}
	desc := -1
	if fd {
		file, err := os.Open(os.DevNull)
		if err != nil {
			r.t.Fatal(err)
		}
		defer file.Close()
		desc = int(file.Fd())
	}
	// A send after the kill finds the channel closed: that is fine.
	fs.p.Send(f, desc)
	if d := f.GetDone(); d != nil {
		delete(fs.held, d.GetConnId())
	}
}

// honestDone returns a connection of an honest worker.
func (r *hostileRun) honestDone() {
	which, how := r.byte(), r.byte()
	var all [][2]any
	for _, fs := range r.fakes {
		if !fs.honest || fs.dead {
			continue
		}
		for _, id := range heldIDs(fs) {
			all = append(all, [2]any{fs, id})
		}
	}
	if len(all) == 0 {
		return
	}
	e := all[int(which)%len(all)]
	fs, id := e[0].(*fakeState), e[1].(uint64)
	disp := []proto.Disposition{proto.Disposition_KEEP_ALIVE, proto.Disposition_CLOSE, proto.Disposition_LINGER}[how%3]
	m := done(id, fs.held[id]+1, disp)
	delete(fs.held, id)
	if err := fs.p.Done(m); err != nil {
		r.t.Fatalf("an honest worker's Done: %v", err)
	}
}

// client makes a client act: a request on an open connection, a new
// connection with a request, or a close.
func (r *hostileRun) client() {
	which, what := r.byte(), r.byte()
	switch what % 3 {
	case 0:
		if len(r.clients) > 0 {
			c := r.clients[int(which)%len(r.clients)]
			r.request(c, false)
			r.placed(c, false)
		}
	case 1:
		if r.nextIP >= 60 {
			return
		}
		ip := fmt.Sprintf("127.0.0.%d", 10+r.nextIP)
		r.nextIP++
		if which%4 == 0 {
			ip = "127.0.0.9" // the trusted proxy
		}
		c := r.h.dial(ip)
		r.clients = append(r.clients, c)
		if which >= 128 {
			// A head that asks to close: its descriptor is given up
			// at dispatch (closingHead).
			c.Write([]byte("GET /login HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
		} else {
			r.request(c, ip == "127.0.0.9")
		}
		r.placed(c, true)
	case 2:
		if len(r.clients) > 0 {
			i := int(which) % len(r.clients)
			r.clients[i].Close()
			r.clients = slices.Delete(r.clients, i, i+1)
		}
	}
}

func (r *hostileRun) run(prog []byte) {
	r.prog = prog
	r.h.checkInvariants()
	for steps := 0; r.pc < len(r.prog) && steps < 128; steps++ {
		switch op := r.byte() % 16; {
		case op < 12:
			r.sendHostile(r.hostileFrame(hostileOps[op]))
		case op == 12:
			r.sendHostile(r.otherFrame())
		case op == 13:
			r.honestDone()
		case op == 14:
			r.client()
		case op == 15:
			r.advance(time.Duration(r.byte()%50) * 100 * time.Millisecond)
		}
		r.settle()
	}
	r.stillServes()
}

// advance moves the clock by at most 4.9 s, under the ping interval, and
// waits until every live worker has answered the pings sent meanwhile: the
// fake clock jumps, and an honest worker must not miss a ping for it.
func (r *hostileRun) advance(by time.Duration) {
	r.h.clock.add(by)
	// Two round trips: the second runs after an iteration that read the
	// moved clock and ran its timers.
	r.h.snapshot()
	r.h.snapshot()
	for deadline := time.Now().Add(frameWait); ; time.Sleep(100 * time.Microsecond) {
		// Every live worker's answer to the last ping is in: its pong
		// was read at or after the ping (the clock stands still here).
		answered := true
		r.h.inLoop(func(d *dispatcher) {
			for _, w := range d.workers {
				if w.ch != nil && w.lastPong.Before(d.nextPing.Add(-pingInterval)) {
					answered = false
				}
			}
		})
		if answered {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatal("a worker did not answer the last ping")
		}
	}
}

// stillServes expects a new client to be served, the honest workers
// returning every connection they get meanwhile; no honest worker may have
// been killed.
func (r *hostileRun) stillServes() {
	c := r.h.dial("127.0.0.250")
	r.request(c, false)
	local := c.LocalAddr().String()
	for deadline := time.Now().Add(frameWait); ; {
		r.drain()
		served := false
		for _, fs := range r.fakes {
			if fs.honest && fs.dead {
				r.t.Fatalf("honest worker %d was killed", fs.p.slot)
			}
			for _, id := range heldIDs(fs) {
				ours := fs.peers[id] == local
				if !fs.honest && !ours {
					continue
				}
				if err := fs.p.Done(done(id, fs.held[id]+1, proto.Disposition_CLOSE)); err != nil && fs.honest {
					r.t.Fatal(err)
				}
				delete(fs.held, id)
				served = served || ours
			}
		}
		if served {
			break
		}
		if time.Now().After(deadline) {
			s := r.h.snapshot()
			r.t.Fatalf("a new client was not served: %d at workers, pool %d, conns %v, workers %+v", s.AtWorkers, s.Pool, s.Conns, s.Workers)
		}
		time.Sleep(time.Millisecond)
	}
	if _, closed := closedByPeer(c); !closed {
		r.t.Fatal("the new client's connection was not closed after its Done")
	}
	r.settle()
}

package supervisor

func linkOf(c *conn) link { return link(c.id&connSlotMask) + 1 }

const (
	listNone listID = iota
	// on the t* links
	listFreshTimers    // fresh and proxy, by accept (first_byte_timeout)
	listIdleTimers     // idle (keep_alive_idle_timeout)
	listWaitTimers     // waiting, in either queue (no_worker_timeout)
	listLingerTimers   // linger
	listBodyWaitTimers // round bodyWait (no_worker_timeout)
	listGapTimers      // head, by its latest byte
	// on the q* links
	listHeadTimers  // head, by its first byte
	listWaiting     // waiting for a pool slot, oldest first
	listBodyWaiting // round bodyWait, oldest first
	// a client's, on the q* links
	listClientWaiting // waiting over the client's share
	// a client's, on the i* links
	listIncomplete // fresh, proxy and head, oldest first
)

// The dispatcher's own lists are d.lists, indexed by id; its timer lists
// are the ids from firstTimer to lastTimer, each with its deadline and its
// expiry in timerTable (loop.go).
const (
	firstTimer         = listFreshTimers
	lastTimer          = listHeadTimers
	numDispatcherLists = listBodyWaiting + 1
)

// connList is an intrusive FIFO of connections. A connection is in at most one
// timer list (links t*), at most one wait queue or head-deadline list (links
// q*) and at most one client's list of incomplete connections (links i*) at a
// time, so all are O(1) to join, leave and pop without allocating.
//
// Timeouts are uniform per state (first byte, keep-alive idle, no worker,
// linger), so appending at the tail keeps each timer list sorted by deadline:
// a FIFO per state is a correct timer structure.
type connList struct {
	slab       *connSlab
	head, tail link
	n          int
	id         listID
}

func newConnList(s *connSlab, id listID) connList { return connList{slab: s, id: id} }

func (l *connList) links(c *conn) (prev, next *link, in *listID) {
	switch {
	case l.id == listIncomplete:
		return &c.iprev, &c.inext, &c.ilist
	case l.id >= listHeadTimers:
		return &c.qprev, &c.qnext, &c.qlist
	}
	return &c.tprev, &c.tnext, &c.tlist
}

// first returns the oldest record, or nil.
func (l *connList) first() *conn { return l.slab.at(l.head) }

// last returns the newest record, or nil.
func (l *connList) last() *conn { return l.slab.at(l.tail) }

// next returns the record after c on l, or nil.
func (l *connList) next(c *conn) *conn {
	_, next, _ := l.links(c)
	return l.slab.at(*next)
}

func (l *connList) push(c *conn) {
	prev, next, in := l.links(c)
	*prev, *next, *in = l.tail, 0, l.id
	k := linkOf(c)
	if t := l.slab.at(l.tail); t != nil {
		_, tnext, _ := l.links(t)
		*tnext = k
	} else {
		l.head = k
	}
	l.tail = k
	l.n++
}

// remove takes c off l; a record on another list of the same kind (another
// client's) is the caller's mistake, which the ids cannot tell apart.
func (l *connList) remove(c *conn) {
	prev, next, in := l.links(c)
	if *in != l.id {
		return
	}
	if p := l.slab.at(*prev); p != nil {
		_, pnext, _ := l.links(p)
		*pnext = *next
	} else {
		l.head = *next
	}
	if n := l.slab.at(*next); n != nil {
		nprev, _, _ := l.links(n)
		*nprev = *prev
	} else {
		l.tail = *prev
	}
	*prev, *next, *in = 0, 0, listNone
	l.n--
}

func (l *connList) pop() *conn {
	c := l.first()
	if c != nil {
		l.remove(c)
	}
	return c
}

// timers owns the dispatcher's connection lists, indexed by list id: the
// per-state deadline lists, each a FIFO sorted by deadline
// since each timeout is uniform for its state, and the wait queues.
// setState (park.go) and setRound (round.go) move connections between them.
type timers struct {
	lists [numDispatcherLists]connList
	// badMoves counts state changes setState does not permit (zero unless
	// the dispatcher is wrong; the tests' invariants check it).
	badMoves uint64
}

// initLists names the dispatcher's lists; a client's are named by newClient.
func (t *timers) initLists(s *connSlab) {
	for id := range t.lists {
		t.lists[id] = newConnList(s, listID(id))
	}
}

// listOf returns the list id names for c: the dispatcher's, or one of c's
// client's.
func (t *timers) listOf(c *conn, id listID) *connList {
	switch id {
	case listNone:
		return nil
	case listClientWaiting:
		return &c.client.waiting
	case listIncomplete:
		return &c.client.incomplete
	}
	return &t.lists[id]
}

// leaveTimer takes c off its timer list, if any.
func (t *timers) leaveTimer(c *conn) {
	if c.tlist != listNone {
		t.listOf(c, c.tlist).remove(c)
	}
}

// leaveQueue takes c off its wait queue or head-deadline list, if any.
func (t *timers) leaveQueue(c *conn) {
	if c.qlist != listNone {
		t.listOf(c, c.qlist).remove(c)
	}
}

// leaveIncomplete takes c off its client's incomplete list, if it is on it.
func (t *timers) leaveIncomplete(c *conn) {
	if c.ilist != listNone {
		t.listOf(c, c.ilist).remove(c)
	}
}

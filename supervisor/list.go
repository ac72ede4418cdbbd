package supervisor

// connList is an intrusive FIFO of connections. A connection is in at most one
// timer list (links t*), at most one wait queue or head-deadline list (links
// q*) and at most one client's list of incomplete connections (links i*) at a
// time, so all are O(1) to join, leave and pop without allocating.
//
// Timeouts are uniform per state (first byte, keep-alive idle, no worker,
// linger), so appending at the tail keeps each timer list sorted by deadline:
// a FIFO per state is a correct timer structure.
type connList struct {
	head, tail *conn
	n          int
	wait       bool // uses the q* links instead of the t* links
	incomplete bool // uses the i* links
}

func (l *connList) links(c *conn) (prev, next **conn, in **connList) {
	if l.incomplete {
		return &c.iprev, &c.inext, &c.ilist
	}
	if l.wait {
		return &c.qprev, &c.qnext, &c.qlist
	}
	return &c.tprev, &c.tnext, &c.tlist
}

func (l *connList) push(c *conn) {
	prev, next, in := l.links(c)
	*prev, *next, *in = l.tail, nil, l
	if l.tail != nil {
		_, tnext, _ := l.links(l.tail)
		*tnext = c
	} else {
		l.head = c
	}
	l.tail = c
	l.n++
}

func (l *connList) remove(c *conn) {
	prev, next, in := l.links(c)
	if *in != l {
		return
	}
	if *prev != nil {
		_, pnext, _ := l.links(*prev)
		*pnext = *next
	} else {
		l.head = *next
	}
	if *next != nil {
		nprev, _, _ := l.links(*next)
		*nprev = *prev
	} else {
		l.tail = *prev
	}
	*prev, *next, *in = nil, nil, nil
	l.n--
}

func (l *connList) pop() *conn {
	c := l.head
	if c != nil {
		l.remove(c)
	}
	return c
}

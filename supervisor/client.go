package supervisor

import "net/netip"

// client is the dispatcher's record of one client key. Owned by the loop.
type client struct {
	key     netip.Addr
	trusted bool     // peer is in trusted_proxies: exempt from per-client caps and share
	conns   int      // open connections
	out     int      // connections at workers
	waiting connList // readable connections over the share, oldest first
	waits   uint64   // times a connection had to wait for this client's share
	// incomplete lists its connections that have not completed a head,
	// oldest first.
	incomplete connList
	// bodyBytes and bodyConns are what its connections receiving a body
	// outside the pool charge to the body budget.
	bodyBytes int64
	bodyConns int
	// streams counts its connections charged to the stream budget.
	streams int
}

// newClient returns the record of a client key with no connection yet, its
// lists linking records in s.
func newClient(key netip.Addr, trusted bool, s *connSlab) *client {
	return &client{key: key, trusted: trusted,
		waiting: newConnList(s, listClientWaiting), incomplete: newConnList(s, listIncomplete)}
}

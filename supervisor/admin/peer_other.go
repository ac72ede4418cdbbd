//go:build !linux

package admin

import (
	"errors"
	"net"
)

// errPeerCredUnsupported refuses every admin connection where the peer's
// credentials cannot be read: the admin socket fails closed.
var errPeerCredUnsupported = errors.New("supervisor: peer credentials are not implemented on this system")

// peerUID is not implemented outside Linux yet (OpenBSD: getsockopt
// SO_PEERCRED into struct sockpeercred, which x/sys/unix does not wrap).
func peerUID(c *net.UnixConn) (int, error) { return -1, errPeerCredUnsupported }

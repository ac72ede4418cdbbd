//go:build !linux

package relay

// splice is Linux's; elsewhere every relay uses the copy loop.
func (s *relayState) splice(dst, src Conn) (int64, error) { return 0, errNoSplice }

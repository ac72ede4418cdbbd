//go:build !linux

package worker

// splice is Linux's; elsewhere every relay uses the copy loop.
func (s *relayState) splice(dst, src relayConn) (int64, error) { return 0, errNoSplice }

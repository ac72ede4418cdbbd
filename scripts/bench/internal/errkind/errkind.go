// Package errkind names a client error the way the benchmark tools count
// them: a timeout, an end of stream, or the failed operation.
package errkind

import (
	"errors"
	"io"
	"net"
)

// Of returns the bucket err is counted under.
func Of(err error) string {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "eof"
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		return oe.Op + ": " + oe.Err.Error()
	}
	return err.Error()
}

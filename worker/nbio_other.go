//go:build !linux

package worker

import "golang.org/x/sys/unix"

// readNB, writeNB and peekNB are read(2), write(2) and a peek on a
// non-blocking socket.
func readNB(fd int, p []byte) (int, error) {
	n, err := unix.Read(fd, p)
	if err != nil {
		return 0, err
	}
	return n, nil
}

func writeNB(fd int, p []byte) (int, error) {
	n, err := unix.Write(fd, p)
	if err != nil {
		return 0, err
	}
	return n, nil
}

// peekNB is recv(2) with MSG_PEEK on a non-blocking socket.
func peekNB(fd int, p []byte) (int, error) {
	n, _, _, _, err := unix.Recvmsg(fd, p, nil, unix.MSG_PEEK|unix.MSG_DONTWAIT)
	if err != nil {
		return 0, err
	}
	return n, nil
}

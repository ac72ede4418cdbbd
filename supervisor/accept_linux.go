package supervisor

import "golang.org/x/sys/unix"

// accept takes one connection, non-blocking and close-on-exec atomically.
func accept(lfd int) (int, unix.Sockaddr, error) {
	return unix.Accept4(lfd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
}

package spawner

import (
	"testing"

	"golang.org/x/sys/unix"
)

// FuzzRecv feeds arbitrary datagrams to the spawner's reader: each is a
// message or an error, never a panic, and a malformed one carries no
// descriptor out.
func FuzzRecv(f *testing.F) {
	for _, s := range []string{
		`{"op":"spawn","id":1,"args":["worker","-sandbox.mode=strict"]}`,
		`{"op":"kill","pid":1}`,
		`{"op":"check","id":2,"args":["worker"]}`,
		`{"op":"exited","id":3,"pid":42,"signal":9}`,
		`{"op":`, `[]`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > maxMessage {
			return
		}
		pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Skip(err)
		}
		defer unix.Close(pair[0])
		defer unix.Close(pair[1])
		if err := unix.Sendmsg(pair[0], b, nil, nil, 0); err != nil {
			t.Skip(err)
		}
		m, fds, err := recv(pair[1])
		if err != nil {
			if len(fds) != 0 {
				t.Errorf("error %v with %d descriptors", err, len(fds))
			}
			return
		}
		if len(fds) != 0 {
			t.Errorf("descriptors from a datagram that carried none: %v", fds)
		}
		_ = m.Op
	})
}

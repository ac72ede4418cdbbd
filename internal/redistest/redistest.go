// Package redistest runs a real redis-server for tests: on a free loopback
// port, in a temporary directory, persisting nothing. The cluster store's
// unit tests and the end-to-end tests share it.
package redistest

import (
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// Server is a redis-server a test started; it can be stopped and started
// again on the same port, as a store that goes away and comes back.
type Server struct {
	tb   testing.TB
	port int
	dir  string
	cmd  *exec.Cmd
}

// Start starts a redis-server, stopped when the test ends, or skips the
// test when none is installed.
func Start(tb testing.TB) *Server {
	tb.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		tb.Skip("redis-server is not installed (Debian package redis-server; .ci/run installs it): the cluster tests need one")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &Server{tb: tb, port: port, dir: tb.TempDir()}
	s.Start()
	tb.Cleanup(s.Stop)
	return s
}

// Addr is the server's address.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// Start (re)starts the server on its port and waits until it listens.
func (s *Server) Start() {
	s.tb.Helper()
	s.cmd = exec.Command("redis-server", "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", s.dir)
	if err := s.cmd.Start(); err != nil {
		s.tb.Fatal(err)
	}
	for range 200 {
		if c, err := net.Dial("tcp", s.Addr()); err == nil {
			c.Close()
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.tb.Fatal("redis-server did not listen within 2s")
}

// Stop kills the server, as a store that fails.
func (s *Server) Stop() {
	if s.cmd != nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
		s.cmd = nil
	}
}

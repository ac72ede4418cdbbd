package sockets

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

func TestParseListenFDs(t *testing.T) {
	const pid = 4242
	tests := []struct {
		name                 string
		lpid, lfds, lfdnames string
		want                 []ActivatedSocket
		wantErr              string
	}{
		{"nothing", "", "", "", nil, ""},
		{"no pid", "", "2", "a:b", nil, ""},
		{"another process", "1", "2", "a:b", nil, ""},
		{"one unnamed", "4242", "1", "", []ActivatedSocket{{FD: 3}}, ""},
		{"two named", "4242", "2", "http:https", []ActivatedSocket{{FD: 3, Name: "http"}, {FD: 4, Name: "https"}}, ""},
		{"zero", "4242", "0", "", []ActivatedSocket{}, ""},
		{"bad pid", "me", "1", "", nil, "LISTEN_PID"},
		{"negative pid", "-1", "1", "", nil, "LISTEN_PID"},
		{"bad count", "4242", "x", "", nil, "LISTEN_FDS"},
		{"missing count", "4242", "", "", nil, "LISTEN_FDS"},
		{"negative count", "4242", "-2", "", nil, "LISTEN_FDS"},
		{"huge count", "4242", "100000", "", nil, "LISTEN_FDS"},
		{"names short", "4242", "2", "http", nil, "LISTEN_FDNAMES"},
		{"names long", "4242", "1", "a:b", nil, "LISTEN_FDNAMES"},
	}
	for _, tt := range tests {
		got, err := parseListenFDs(pid, tt.lpid, tt.lfds, tt.lfdnames)
		if tt.wantErr != "" {
			if err == nil || !errors.Is(err, ErrActivation) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: error %v, want ErrActivation naming %s", tt.name, err, tt.wantErr)
			}
			continue
		}
		if err != nil || len(got) != len(tt.want) {
			t.Errorf("%s: got %v, %v; want %v", tt.name, got, err, tt.want)
			continue
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("%s: socket %d = %+v, want %+v", tt.name, i, got[i], tt.want[i])
			}
		}
	}
}

// tcpSocket returns a raw descriptor: a listening TCP socket on a loopback
// port when listen is true, else a bound, unlistened one.
func tcpSocket(t *testing.T, listen bool) (int, netip.AddrPort) {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if listen {
		if err := unix.Listen(fd, 16); err != nil {
			t.Fatal(err)
		}
	}
	sa, _ := unix.Getsockname(fd)
	return fd, AddrPort(sa)
}

func isOpen(fd int) bool {
	_, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	return err == nil
}

func testConfig(listeners ...config.Listener) *config.Config {
	return &config.Config{Listeners: listeners}
}

func TestMatchInherited(t *testing.T) {
	t.Run("by name", func(t *testing.T) {
		fd, _ := tcpSocket(t, true)
		defer unix.Close(fd)
		cfg := testConfig(config.Listener{Name: "http", Address: netip.MustParseAddrPort("127.0.0.1:1")})
		var log bytes.Buffer
		got, err := MatchInherited(cfg, []ActivatedSocket{{FD: fd, Name: "http"}}, hclog.New(&hclog.LoggerOptions{Output: &log}))
		if err != nil || got["http"] != fd {
			t.Fatalf("got %v, %v", got, err)
		}
		// Bound elsewhere than configured: served, and the operator told.
		if !strings.Contains(log.String(), "[WARN]") || !strings.Contains(log.String(), "configured=127.0.0.1:1") {
			t.Errorf("no warning for the address mismatch: %q", log.String())
		}
	})
	t.Run("by name, same address", func(t *testing.T) {
		fd, addr := tcpSocket(t, true)
		defer unix.Close(fd)
		cfg := testConfig(config.Listener{Name: "http", Address: addr})
		var log bytes.Buffer
		got, err := MatchInherited(cfg, []ActivatedSocket{{FD: fd, Name: "http"}}, hclog.New(&hclog.LoggerOptions{Output: &log}))
		if err != nil || got["http"] != fd || log.Len() != 0 {
			t.Fatalf("got %v, %v, log %q", got, err, log.String())
		}
	})
	t.Run("by address", func(t *testing.T) {
		fd, addr := tcpSocket(t, true)
		defer unix.Close(fd)
		cfg := testConfig(
			config.Listener{Name: "other", Address: netip.MustParseAddrPort("127.0.0.1:1")},
			config.Listener{Name: "web", Address: addr},
		)
		// systemd names an unnamed socket after its unit: no listener has
		// that name, so the address decides.
		got, err := MatchInherited(cfg, []ActivatedSocket{{FD: fd, Name: "gatehouse.socket"}}, hclog.NewNullLogger())
		if err != nil || got["web"] != fd || len(got) != 1 {
			t.Fatalf("got %v, %v", got, err)
		}
	})
	t.Run("unmatched", func(t *testing.T) {
		fd1, _ := tcpSocket(t, true)
		fd2, _ := tcpSocket(t, true)
		cfg := testConfig(config.Listener{Name: "http", Address: netip.MustParseAddrPort("127.0.0.1:1")})
		_, err := MatchInherited(cfg, []ActivatedSocket{{FD: fd1, Name: "http"}, {FD: fd2, Name: "admin"}}, hclog.NewNullLogger())
		if !errors.Is(err, ErrActivation) || !strings.Contains(err.Error(), `"admin"`) {
			t.Fatalf("error %v, want ErrActivation naming the socket", err)
		}
		if isOpen(fd1) || isOpen(fd2) {
			t.Error("descriptors left open after the error")
		}
	})
	t.Run("twice", func(t *testing.T) {
		fd1, _ := tcpSocket(t, true)
		fd2, _ := tcpSocket(t, true)
		cfg := testConfig(config.Listener{Name: "http", Address: netip.MustParseAddrPort("127.0.0.1:1")})
		_, err := MatchInherited(cfg, []ActivatedSocket{{FD: fd1, Name: "http"}, {FD: fd2, Name: "http"}}, hclog.NewNullLogger())
		if !errors.Is(err, ErrActivation) || !strings.Contains(err.Error(), "second socket") {
			t.Fatalf("error %v", err)
		}
	})
}

func TestOpenListenersInherited(t *testing.T) {
	fd, addr := tcpSocket(t, true)
	cfg := testConfig(
		config.Listener{Name: "http", Address: netip.MustParseAddrPort("127.0.0.1:1")}, // not bound: inherited
		config.Listener{Name: "b", Address: netip.MustParseAddrPort("127.0.0.1:0")},
	)
	ls, err := Open(cfg.Listeners, map[string]int{"http": fd})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, l := range ls {
			unix.Close(l.FD)
		}
	}()
	if ls[0].FD != fd || ls[0].Addr != addr || ls[0].CfgAddr.Port() != 1 {
		t.Errorf("inherited listener %+v, want fd %d at %v", ls[0], fd, addr)
	}
	if fl, _ := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); fl&unix.O_NONBLOCK == 0 {
		t.Error("inherited socket left blocking")
	}
	if fdfl, _ := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); fdfl&unix.FD_CLOEXEC == 0 {
		t.Error("inherited socket not close-on-exec")
	}
	if ls[1].Addr.Port() == 0 || ls[1].FD == fd {
		t.Errorf("second listener not bound: %+v", ls[1])
	}
	// It accepts.
	c, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

func TestOpenListenersRejects(t *testing.T) {
	cfg := testConfig(config.Listener{Name: "http", Address: netip.MustParseAddrPort("127.0.0.1:0")})
	notListening, _ := tcpSocket(t, false)
	udp, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	unix.Bind(udp, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}})
	var pipe [2]int
	unix.Pipe2(pipe[:], unix.O_CLOEXEC)
	defer unix.Close(pipe[1])
	for name, fd := range map[string]int{"not listening": notListening, "udp": udp, "pipe": pipe[0]} {
		_, err := Open(cfg.Listeners, map[string]int{"http": fd})
		if err == nil || !strings.Contains(err.Error(), `listener "http"`) {
			t.Errorf("%s: error %v, want one naming the listener", name, err)
		}
		if isOpen(fd) {
			t.Errorf("%s: descriptor left open", name)
			unix.Close(fd)
		}
	}
	// A name the configuration lacks.
	fd, _ := tcpSocket(t, true)
	if _, err := Open(cfg.Listeners, map[string]int{"nope": fd}); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("unknown name: %v", err)
	}
	if isOpen(fd) {
		t.Error("descriptor for an unknown name left open")
	}
}

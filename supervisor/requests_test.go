package supervisor

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/gatehouse-dev/gatehouse/config"
)

// forwardedDispatcher is a dispatcher with only what forwardedClient reads.
func forwardedDispatcher(trusted ...string) *dispatcher {
	cfg := &config.Config{IPv6ClientPrefixLength: 64}
	for _, p := range trusted {
		cfg.TrustedProxies = append(cfg.TrustedProxies, netip.MustParsePrefix(p))
	}
	return &dispatcher{cfg: cfg}
}

func TestForwardedClient(t *testing.T) {
	d := forwardedDispatcher("127.0.0.5/32", "10.0.0.0/8", "2001:db8:ffff::/48")
	peer := netip.MustParseAddr("127.0.0.5")
	// chain returns n trusted entries after client, as one header value.
	chain := func(client string, n int) []string {
		parts := []string{client}
		for i := 0; i < n; i++ {
			parts = append(parts, fmt.Sprintf("10.0.%d.%d", i/256, i%256))
		}
		return []string{strings.Join(parts, ", ")}
	}
	tests := []struct {
		name   string
		values []string
		want   string
	}{
		{"one entry", []string{"203.0.113.7"}, "203.0.113.7"},
		{"rightmost untrusted wins", []string{"198.51.100.1, 203.0.113.7"}, "203.0.113.7"},
		{"trusted entries are walked past", []string{"203.0.113.7, 10.1.2.3, 127.0.0.5"}, "203.0.113.7"},
		{"several header lines, rightmost last", []string{"203.0.113.7", "10.1.2.3"}, "203.0.113.7"},
		{"several lines, the last untrusted", []string{"203.0.113.7", "198.51.100.1, 10.1.2.3"}, "198.51.100.1"},
		{"spaces and empty elements", []string{" 203.0.113.7 ,, ", " ,10.1.2.3"}, "203.0.113.7"},
		{"only trusted entries", []string{"10.1.2.3, 10.4.5.6"}, "127.0.0.5"},
		{"empty", []string{""}, "127.0.0.5"},
		{"no values", nil, "127.0.0.5"},
		{"invalid entry", []string{"not-an-ip"}, "127.0.0.5"},
		{"invalid entry before a valid one is not reached", []string{"not-an-ip, 203.0.113.7"}, "203.0.113.7"},
		{"invalid entry after trusted ones", []string{"203.0.113.7, garbage, 10.1.2.3"}, "127.0.0.5"},
		{"port is not an IP literal", []string{"203.0.113.7:443"}, "127.0.0.5"},
		{"bracketed IPv6 is not an IP literal", []string{"[2001:db8::1]"}, "127.0.0.5"},
		{"zoned IPv6 is refused", []string{"fe80::1%eth0"}, "127.0.0.5"},
		{"obfuscated identifier (RFC 7239 style)", []string{"_hidden"}, "127.0.0.5"},
		{"IPv6 masked to the prefix length", []string{"2001:db8:1:2:3:4:5:6"}, "2001:db8:1:2::"},
		{"IPv6 trusted prefix walked past", []string{"2001:db8:1:2::9, 2001:db8:ffff:1::1"}, "2001:db8:1:2::"},
		{"IPv4-mapped IPv6 is the IPv4 address", []string{"::ffff:203.0.113.7"}, "203.0.113.7"},
		{"IPv4-mapped trusted proxy walked past", []string{"203.0.113.7, ::ffff:10.1.2.3"}, "203.0.113.7"},
		{"31 trusted: the client is the 32nd entry", chain("203.0.113.7", 31), "203.0.113.7"},
		{"32 trusted: the client is past the bound", chain("203.0.113.7", 32), "127.0.0.5"},
		{"1000 trusted", chain("203.0.113.7", 1000), "127.0.0.5"},
		{"the bound counts entries over several lines", append(make([]string, 0), chain("203.0.113.7", 16)[0], chain("10.9.9.9", 16)[0]), "127.0.0.5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := d.forwardedClient(tt.values, peer); got.String() != tt.want {
				t.Errorf("forwardedClient(%.80q) = %s, want %s", tt.values, got, tt.want)
			}
		})
	}
}

// With no trusted proxies configured every entry is a candidate: the
// rightmost valid one is the client.
func TestForwardedClientNoTrusted(t *testing.T) {
	d := forwardedDispatcher()
	peer := netip.MustParseAddr("192.0.2.99")
	if got := d.forwardedClient([]string{"203.0.113.7, 198.51.100.1"}, peer); got.String() != "198.51.100.1" {
		t.Errorf("got %s, want 198.51.100.1", got)
	}
}
func TestClosingHead(t *testing.T) {
	for _, tc := range []struct {
		head string
		want bool
	}{
		{"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", true},
		{"GET / HTTP/1.1\r\nHost: x\r\nconnection:Keep-Alive, CLOSE\r\n\r\n", true},
		{"\r\nGET / HTTP/1.1\r\nConnection: close\r\n\r\n", true},
		{"GET / HTTP/1.0\r\nHost: x\r\n\r\n", true},
		{"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", false},
		{"GET / HTTP/1.0\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n", true},
		{"GET / HTTP/1.1\r\nHost: x\r\n\r\n", false},
		{"GET / HTTP/1.1\r\nHost: x\r\nConnection: closed\r\n\r\n", false},
		{"GET / HTTP/1.1\r\nX-Connection: close\r\n\r\n", false},
		// A body may follow: the worker may linger.
		{"POST / HTTP/1.1\r\nConnection: close\r\nContent-Length: 3\r\n\r\n", false},
		{"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", false},
		// Bytes after the head: a pipelined request despite the close.
		{"GET / HTTP/1.1\r\nConnection: close\r\n\r\nGET / HTTP/1.1\r\n\r\n", false},
		// A folded line, a line without a colon: the worker's to judge.
		{"GET / HTTP/1.1\r\nConnection: close\r\n x\r\n\r\n", false},
		{"GET / HTTP/1.1\r\nConnection close\r\n\r\n", false},
		{"GET / HTTP/1.1\r\nConnection: close\r\n", false},
		{"GET / HTTP/1.0\nHost: x\n\n", true},
	} {
		if got := closingHead([]byte(tc.head)); got != tc.want {
			t.Errorf("closingHead(%q) = %v, want %v", tc.head, got, tc.want)
		}
	}
}

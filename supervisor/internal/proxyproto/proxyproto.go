// Package proxyproto reads the PROXY protocol header (versions 1 and 2) that
// an L4 load balancer such as HAProxy or a cloud balancer sends first on a
// connection, naming the client it accepted.
//
// Parse works on the bytes received so far and never blocks, so the
// supervisor's event loop can call it on every wake-up with what it peeked
// from the socket: it returns ErrIncomplete while the bytes are a valid
// beginning of a header, and fails as soon as they cannot be one.
//
// Scope: the header only, as the protocol's specification (haproxy.org,
// proxy-protocol.txt) defines it for a receiver. TLVs of version 2 are
// skipped unread. Non-goals: sending headers, UDP, UNIX-socket addresses
// (accepted but not reported as a source), deciding whom to trust.
package proxyproto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// Command is what a header says about the connection.
type Command uint8

const (
	// Local is a connection the balancer opened itself (a health check):
	// the connection's own addresses stand.
	Local Command = iota
	// Proxy is a relayed connection; Header.Source names the client when
	// the header carries an internet address.
	Proxy
)

// Header is a parsed PROXY header.
type Header struct {
	Version int // 1 or 2
	Command Command
	// Source and Destination are the client's and the balancer's listening
	// addresses as the balancer saw them. They are valid only for a Proxy
	// header with a TCP over IPv4 or IPv6 family; otherwise the header
	// says nothing about the client (v1 UNKNOWN, v2 UNSPEC or UNIX, Local).
	Source, Destination netip.AddrPort
}

// Limits of the protocol.
const (
	// v1MaxLen is the longest version 1 header, CRLF included.
	v1MaxLen = 107
	// v2HeaderLen is the fixed part of a version 2 header.
	v2HeaderLen = 16
	// MaxLen is the longest header Parse accepts. Version 2 allows 65535
	// bytes of addresses and TLVs; balancers send a few hundred at most
	// (AWS and GCP TLVs included), and the supervisor peeks at most this
	// much from a connection.
	MaxLen = 1024
)

// v2Signature starts every version 2 header.
var v2Signature = []byte("\r\n\r\n\x00\r\nQUIT\n")

// v1Prefix starts every version 1 header.
var v1Prefix = []byte("PROXY ")

// ErrIncomplete reports bytes that are a valid beginning of a header: read
// more and parse again.
var ErrIncomplete = errors.New("proxyproto: incomplete header")

// ErrMalformed is matched (errors.Is) by every error for bytes that are not
// a valid header whatever follows.
var ErrMalformed = errors.New("proxyproto: malformed header")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

// Parse parses the PROXY header at the start of b. It returns the header
// and its length in bytes (what follows is the client's own data), or
// ErrIncomplete, or an error matching ErrMalformed.
func Parse(b []byte) (Header, int, error) {
	switch {
	case hasPrefix(b, v2Signature):
		if len(b) < len(v2Signature) {
			return Header{}, 0, ErrIncomplete
		}
		return parseV2(b)
	case hasPrefix(b, v1Prefix):
		if len(b) < len(v1Prefix) {
			return Header{}, 0, ErrIncomplete
		}
		return parseV1(b)
	}
	return Header{}, 0, malformed("no PROXY signature")
}

// hasPrefix reports whether b and p agree on their common length.
func hasPrefix(b, p []byte) bool {
	n := min(len(b), len(p))
	return bytes.Equal(b[:n], p[:n])
}

// parseV2 parses a binary header (specification §2.2):
//
//	signature(12) ver_cmd(1) fam(1) len(2, big-endian) addresses TLVs
func parseV2(b []byte) (Header, int, error) {
	if len(b) < v2HeaderLen {
		// Check what is there already, to fail early.
		if len(b) > 12 && b[12]>>4 != 2 {
			return Header{}, 0, malformed("version %d", b[12]>>4)
		}
		return Header{}, 0, ErrIncomplete
	}
	verCmd, fam := b[12], b[13]
	if verCmd>>4 != 2 {
		return Header{}, 0, malformed("version %d", verCmd>>4)
	}
	n := v2HeaderLen + int(binary.BigEndian.Uint16(b[14:16]))
	if n > MaxLen {
		return Header{}, 0, malformed("length %d over %d", n, MaxLen)
	}
	h := Header{Version: 2}
	switch verCmd & 0xf {
	case 0:
		h.Command = Local
	case 1:
		h.Command = Proxy
	default:
		return Header{}, 0, malformed("command %d", verCmd&0xf)
	}
	var addrLen int
	switch fam {
	case 0x00: // UNSPEC
	case 0x11: // TCP over IPv4
		addrLen = 12
	case 0x21: // TCP over IPv6
		addrLen = 36
	case 0x31: // UNIX stream
		addrLen = 216
	default:
		return Header{}, 0, malformed("address family and protocol 0x%02x", fam)
	}
	if n-v2HeaderLen < addrLen {
		return Header{}, 0, malformed("length %d too short for family 0x%02x", n-v2HeaderLen, fam)
	}
	if len(b) < n {
		return Header{}, 0, ErrIncomplete
	}
	if h.Command == Local {
		// "the receiver must accept this connection as valid and must use
		// the real connection endpoints and discard the protocol block
		// including the family which is ignored."
		return h, n, nil
	}
	a := b[v2HeaderLen:]
	switch fam {
	case 0x11:
		src, dst := netip.AddrFrom4([4]byte(a[0:4])), netip.AddrFrom4([4]byte(a[4:8]))
		h.Source = netip.AddrPortFrom(src, binary.BigEndian.Uint16(a[8:10]))
		h.Destination = netip.AddrPortFrom(dst, binary.BigEndian.Uint16(a[10:12]))
	case 0x21:
		src, dst := netip.AddrFrom16([16]byte(a[0:16])), netip.AddrFrom16([16]byte(a[16:32]))
		h.Source = netip.AddrPortFrom(src, binary.BigEndian.Uint16(a[32:34]))
		h.Destination = netip.AddrPortFrom(dst, binary.BigEndian.Uint16(a[34:36]))
	}
	return h, n, nil
}

// parseV1 parses a text header (specification §2.1):
//
//	"PROXY" SP ( "TCP4" / "TCP6" ) SP src SP dst SP srcport SP dstport CRLF
//	"PROXY" SP "UNKNOWN" [ anything but CRLF ] CRLF
//
// at most 107 bytes. Addresses must be of the named family, ports decimal
// 0..65535 without leading zeros.
func parseV1(b []byte) (Header, int, error) {
	end := bytes.IndexByte(b[:min(len(b), v1MaxLen)], '\n')
	if end < 0 {
		if len(b) >= v1MaxLen {
			return Header{}, 0, malformed("version 1 header longer than %d bytes", v1MaxLen)
		}
		if bytes.IndexByte(b, '\r') >= 0 && b[len(b)-1] != '\r' {
			return Header{}, 0, malformed("CR not followed by LF")
		}
		return Header{}, 0, ErrIncomplete
	}
	if end == 0 || b[end-1] != '\r' {
		return Header{}, 0, malformed("line not ended by CRLF")
	}
	line := b[len(v1Prefix) : end-1]
	n := end + 1
	h := Header{Version: 1, Command: Proxy}
	if bytes.HasPrefix(line, []byte("UNKNOWN")) {
		// The rest is to be ignored; the connection's endpoints stand.
		if bytes.IndexByte(line, '\r') >= 0 {
			return Header{}, 0, malformed("CR inside the line")
		}
		return h, n, nil
	}
	f := bytes.Split(line, []byte(" "))
	if len(f) != 5 {
		return Header{}, 0, malformed("%d fields, want 5", len(f))
	}
	var want4 bool
	switch string(f[0]) {
	case "TCP4":
		want4 = true
	case "TCP6":
	default:
		return Header{}, 0, malformed("protocol %q", f[0])
	}
	src, ok1 := parseV1Addr(f[1], want4)
	dst, ok2 := parseV1Addr(f[2], want4)
	sp, ok3 := parseV1Port(f[3])
	dp, ok4 := parseV1Port(f[4])
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return Header{}, 0, malformed("addresses %q", excerpt(line))
	}
	h.Source, h.Destination = netip.AddrPortFrom(src, sp), netip.AddrPortFrom(dst, dp)
	return h, n, nil
}

// parseV1Addr parses an address of version 1, which must be of the family
// the header named.
func parseV1Addr(b []byte, want4 bool) (netip.Addr, bool) {
	a, err := netip.ParseAddr(string(b))
	if err != nil || a.Zone() != "" || a.Is4() != want4 {
		return netip.Addr{}, false
	}
	return a, true
}

// parseV1Port parses a port of version 1: 0..65535 in decimal, without
// leading zeros.
func parseV1Port(b []byte) (uint16, bool) {
	if len(b) == 0 || len(b) > 5 || len(b) > 1 && b[0] == '0' {
		return 0, false
	}
	v := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	return uint16(v), v <= 65535
}

// excerpt returns at most the first 60 bytes of b, for an error message.
func excerpt(b []byte) []byte { return b[:min(len(b), 60)] }

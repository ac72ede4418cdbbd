package proxyproto

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
)

// v2 builds a version 2 header: ver_cmd, fam, then body as the rest.
func v2(verCmd, fam byte, body []byte) []byte {
	b := append([]byte(nil), v2Signature...)
	b = append(b, verCmd, fam, 0, 0)
	binary.BigEndian.PutUint16(b[14:], uint16(len(body)))
	return append(b, body...)
}

// v2inet4 is the address block of TCP over IPv4.
func v2inet4(src, dst netip.AddrPort) []byte {
	b := append(src.Addr().AsSlice(), dst.Addr().AsSlice()...)
	b = binary.BigEndian.AppendUint16(b, src.Port())
	return binary.BigEndian.AppendUint16(b, dst.Port())
}

var (
	client4 = netip.MustParseAddrPort("192.0.2.7:51000")
	front4  = netip.MustParseAddrPort("198.51.100.1:443")
	client6 = netip.MustParseAddrPort("[2001:db8::7]:51000")
	front6  = netip.MustParseAddrPort("[2001:db8::1]:443")
)

func TestParse(t *testing.T) {
	inet6 := append(append(client6.Addr().AsSlice(), front6.Addr().AsSlice()...), 0xc7, 0x38, 0x01, 0xbb)
	tlv := append(v2inet4(client4, front4), 0x04, 0x00, 0x03, 'a', 'b', 'c') // PP2_TYPE_NOOP
	tests := []struct {
		name string
		in   []byte
		want Header
	}{
		{"v1 TCP4", []byte("PROXY TCP4 192.0.2.7 198.51.100.1 51000 443\r\n"), Header{1, Proxy, client4, front4}},
		{"v1 TCP6", []byte("PROXY TCP6 2001:db8::7 2001:db8::1 51000 443\r\n"), Header{1, Proxy, client6, front6}},
		{"v1 UNKNOWN", []byte("PROXY UNKNOWN\r\n"), Header{Version: 1, Command: Proxy}},
		{"v1 UNKNOWN with addresses", []byte("PROXY UNKNOWN ffff:f...f:ffff 1.2.3.4 65535 65535\r\n"), Header{Version: 1, Command: Proxy}},
		{"v1 port 0", []byte("PROXY TCP4 192.0.2.7 198.51.100.1 0 443\r\n"), Header{1, Proxy, netip.AddrPortFrom(client4.Addr(), 0), front4}},
		{"v2 TCP4", v2(0x21, 0x11, v2inet4(client4, front4)), Header{2, Proxy, client4, front4}},
		{"v2 TCP6", v2(0x21, 0x21, inet6), Header{2, Proxy, client6, front6}},
		{"v2 TCP4 with TLV", v2(0x21, 0x11, tlv), Header{2, Proxy, client4, front4}},
		{"v2 LOCAL", v2(0x20, 0x00, nil), Header{Version: 2, Command: Local}},
		{"v2 LOCAL ignores family", v2(0x20, 0x11, v2inet4(client4, front4)), Header{Version: 2, Command: Local}},
		{"v2 UNSPEC", v2(0x21, 0x00, nil), Header{Version: 2, Command: Proxy}},
		{"v2 UNIX", v2(0x21, 0x31, make([]byte, 216)), Header{Version: 2, Command: Proxy}},
	}
	for _, tt := range tests {
		in := append(append([]byte(nil), tt.in...), "GET / HTTP/1.1\r\n"...)
		h, n, err := Parse(in)
		if err != nil || h != tt.want || n != len(tt.in) {
			t.Errorf("%s: got %+v, %d, %v; want %+v, %d", tt.name, h, n, err, tt.want, len(tt.in))
			continue
		}
		// Every proper prefix is a valid beginning.
		for k := 0; k < len(tt.in); k++ {
			if _, _, err := Parse(tt.in[:k]); err != ErrIncomplete {
				t.Errorf("%s: prefix of %d bytes: got %v, want ErrIncomplete", tt.name, k, err)
				break
			}
		}
	}
}

func TestParseMalformed(t *testing.T) {
	long := v2(0x21, 0x11, make([]byte, MaxLen))
	tests := []struct {
		name string
		in   []byte
	}{
		{"HTTP request", []byte("GET / HTTP/1.1\r\n")},
		{"TLS record", []byte("\x16\x03\x01\x00\xa5")},
		{"lower-case proxy", []byte("proxy TCP4 1.2.3.4 5.6.7.8 1 2\r\n")},
		{"v1 bare LF", []byte("PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n")},
		{"v1 bare CR", []byte("PROXY TCP4 1.2.3.4\r5")},
		{"v1 too long", append([]byte("PROXY UNKNOWN "), make([]byte, 120)...)},
		{"v1 UDP4", []byte("PROXY UDP4 1.2.3.4 5.6.7.8 1 2\r\n")},
		{"v1 TCP4 with IPv6", []byte("PROXY TCP4 ::1 ::1 1 2\r\n")},
		{"v1 TCP6 with IPv4", []byte("PROXY TCP6 1.2.3.4 5.6.7.8 1 2\r\n")},
		{"v1 missing port", []byte("PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n")},
		{"v1 two spaces", []byte("PROXY TCP4  1.2.3.4 5.6.7.8 1 2\r\n")},
		{"v1 port over 65535", []byte("PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n")},
		{"v1 port leading zero", []byte("PROXY TCP4 1.2.3.4 5.6.7.8 01 2\r\n")},
		{"v1 port sign", []byte("PROXY TCP4 1.2.3.4 5.6.7.8 +1 2\r\n")},
		{"v1 zone", []byte("PROXY TCP6 fe80::1%eth0 ::1 1 2\r\n")},
		{"v2 version 1", v2(0x11, 0x11, v2inet4(client4, front4))},
		{"v2 version 3 early", append(append([]byte(nil), v2Signature...), 0x31)},
		{"v2 command 2", v2(0x22, 0x11, v2inet4(client4, front4))},
		{"v2 UDP", v2(0x21, 0x12, v2inet4(client4, front4))},
		{"v2 family 4", v2(0x21, 0x41, nil)},
		{"v2 short for TCP4", v2(0x21, 0x11, make([]byte, 11))},
		{"v2 short for TCP6", v2(0x21, 0x21, make([]byte, 35))},
		{"v2 over MaxLen", long[:v2HeaderLen]},
	}
	for _, tt := range tests {
		if h, n, err := Parse(tt.in); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: got %+v, %d, %v; want ErrMalformed", tt.name, h, n, err)
		}
	}
}

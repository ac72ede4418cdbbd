package limits

import (
	"net/netip"
	"testing"
)

func TestClientKey(t *testing.T) {
	tests := []struct {
		addr string
		bits int
		want string
	}{
		{"127.0.0.2", 64, "127.0.0.2"},
		{"::ffff:10.1.2.3", 64, "10.1.2.3"},
		{"2001:db8:1:2:3:4:5:6", 64, "2001:db8:1:2::"},
		{"2001:db8:1:2:ffff::1", 64, "2001:db8:1:2::"},
		{"2001:db8:1:2:3:4:5:6", 48, "2001:db8:1::"},
		{"2001:db8:1:2:3:4:5:6", 128, "2001:db8:1:2:3:4:5:6"},
		{"fe80::1%eth0", 64, "fe80::"},
	}
	for _, tt := range tests {
		got := ClientKey(netip.MustParseAddr(tt.addr), tt.bits)
		if got.String() != tt.want {
			t.Errorf("ClientKey(%s, /%d) = %s, want %s", tt.addr, tt.bits, got, tt.want)
		}
	}
}

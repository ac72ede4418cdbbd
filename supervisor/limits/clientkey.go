package limits

import "net/netip"

// ClientKey reduces a peer address to the key its per-client caps, share,
// rate limits and penalties are counted under: IPv4 as is, IPv4-mapped IPv6
// as the IPv4 address, other IPv6 masked to prefixLen bits (docs/DESIGN.md
// §2.3).
func ClientKey(addr netip.Addr, prefixLen int) netip.Addr {
	addr = addr.Unmap().WithZone("")
	if addr.Is4() {
		return addr
	}
	p, err := addr.Prefix(prefixLen)
	if err != nil {
		return addr
	}
	return p.Addr()
}

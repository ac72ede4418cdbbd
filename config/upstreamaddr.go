package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// Address is one entry of an upstream's addresses, one of three forms:
//
//   - an IP:port literal ("127.0.0.1:9000", "[::1]:9000"): AddrPort;
//   - a host name and port ("app.internal:9000"): Host and Port, resolved
//     by the supervisor (never a worker) at start, at every reload and each
//     resolve_interval; every A and AAAA address it has joins the rotation;
//   - a Unix stream socket ("unix:/run/app.sock"): Unix, an absolute path.
type Address struct {
	AddrPort netip.AddrPort
	Host     string
	Port     uint16
	Unix     string
}

// unixPrefix introduces a Unix socket address, as nginx's
// `proxy_pass http://unix:/path:` and uvicorn's `--uds` spell it.
const unixPrefix = "unix:"

// maxUnixPath is the longest socket path a sockaddr_un holds (108 bytes
// with the terminating NUL).
const maxUnixPath = 107

// String is the address as the configuration spells it: what the admin view
// and the metrics labels show.
func (a Address) String() string {
	switch {
	case a.Unix != "":
		return unixPrefix + a.Unix
	case a.Host != "":
		return net.JoinHostPort(a.Host, strconv.Itoa(int(a.Port)))
	}
	return a.AddrPort.String()
}

// ParseAddress parses one entry of an upstream's addresses.
func ParseAddress(s string) (Address, error) {
	if path, ok := strings.CutPrefix(s, unixPrefix); ok {
		switch {
		case !strings.HasPrefix(path, "/"):
			return Address{}, errors.New("a Unix socket path must be absolute")
		case len(path) > maxUnixPath:
			return Address{}, fmt.Errorf("a Unix socket path holds at most %d bytes, this has %d", maxUnixPath, len(path))
		case hasCTL(path):
			return Address{}, errors.New("a Unix socket path holds no control character")
		}
		return Address{Unix: path}, nil
	}
	host, portText, err := net.SplitHostPort(s)
	if err != nil {
		return Address{}, errors.New("not HOST:PORT")
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil || port == 0 {
		return Address{}, errors.New("the port must be 1..65535")
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.Zone() != "" {
			return Address{}, errors.New("an address with a zone is not supported")
		}
		return Address{AddrPort: netip.AddrPortFrom(ip, uint16(port))}, nil
	}
	if !isHostName(host) {
		return Address{}, errors.New("not an IP address or a host name")
	}
	return Address{Host: strings.ToLower(host), Port: uint16(port)}, nil
}

// isHostName reports whether s is a DNS host name: dot-separated labels of
// letters, digits and hyphens (underscores too, as service names have them),
// not starting or ending with a hyphen, and not all digits and dots (a
// mistyped IPv4 address).
func isHostName(s string) bool {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 || strings.Trim(s, "0123456789.") == "" {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// HasHostNames reports whether any of u's addresses is a host name, which
// the supervisor resolves.
func (u *Upstream) HasHostNames() bool {
	for _, a := range u.Addresses {
		if a.Host != "" {
			return true
		}
	}
	return false
}

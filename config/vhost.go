package config

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/hashicorp/hcl/v2"
)

// Virtual hosts (docs/DESIGN.md §3.6): a route's `hosts` limits it to
// requests whose Host names one of them. Patterns follow nginx's
// server_name: an exact name, or "*.example.org", which matches every name
// ending in ".example.org" (any depth) but not "example.org" itself.

// maxHostName is the longest DNS name accepted (RFC 1035 §2.3.4, without
// the root's trailing dot).
const maxHostName = 253

// routeKey identifies a route for the duplicate check: a host pattern
// ("" for a route without hosts) and a prefix.
type routeKey struct{ host, prefix string }

// routeHosts decodes a route's hosts attribute into r.Hosts and reports
// whether it is valid.
func (d *decoder) routeHosts(attrs hcl.Attributes, name string, r *Route) bool {
	a, ok := attrs["hosts"]
	if !ok {
		return true
	}
	before := len(d.diags)
	ss, rngs := stringListAttr(d, attrs, "hosts", name+": hosts")
	if len(d.diags) > before {
		return false
	}
	if len(ss) == 0 {
		d.errorf(a.Expr.Range(), "Invalid value", "%s: hosts must list at least one host name; leave it out to match any host.", name)
		return false
	}
	valid := true
	seen := map[string]bool{}
	for i, s := range ss {
		p, err := ParseHostPattern(s)
		if err != nil {
			d.errorf(rngs[i], "Invalid host name", "%s: hosts: %s.", name, err)
			valid = false
			continue
		}
		if seen[p] {
			d.errorf(rngs[i], "Duplicate host name", "%s: hosts lists %q twice.", name, p)
			valid = false
			continue
		}
		seen[p] = true
		r.Hosts = append(r.Hosts, p)
	}
	return valid
}

// claimRoute records r's (host, prefix) pairs in keys and reports a pair an
// earlier route already claimed: two routes for one host and prefix would
// make the choice between them depend on the file's order.
// The error is at rng; keys hold where earlier routes are defined (def).
func (d *decoder) claimRoute(r *Route, rng, def hcl.Range, keys map[routeKey]hcl.Range) bool {
	hosts := r.Hosts
	if len(hosts) == 0 {
		hosts = []string{""}
	}
	ok := true
	for _, h := range hosts {
		k := routeKey{h, r.Prefix}
		first, dup := keys[k]
		switch {
		case dup && h == "":
			d.errorf(rng, "Duplicate route", "Route %q is already defined at %s.", r.Prefix, first)
			ok = false
		case dup:
			d.errorf(rng, "Duplicate route", "Route %q for host %q is already defined at %s.", r.Prefix, h, first)
			ok = false
		default:
			keys[k] = def
		}
	}
	return ok
}

// ParseHostPattern checks a host pattern and returns its canonical form:
// lower case, without a trailing dot; an IP address in netip's form,
// without brackets. A pattern is a DNS name (labels of letters, digits, "-"
// and "_"), "*." followed by one, or an IP address. It holds no port.
func ParseHostPattern(s string) (string, error) {
	p := strings.ToLower(strings.TrimSuffix(s, "."))
	if ip := strings.TrimSuffix(strings.TrimPrefix(p, "["), "]"); strings.Contains(ip, ":") || isIPv4(ip) {
		a, err := netip.ParseAddr(ip)
		switch {
		case err == nil && a.Zone() == "":
			return a.String(), nil
		case strings.Count(ip, ":") == 1:
			return "", fmt.Errorf("%q has a port; hosts match the Host header's name, whatever its port", s)
		}
		return "", fmt.Errorf("%q is not a valid IP address", s)
	}
	name, wild := strings.CutPrefix(p, "*.")
	switch {
	case p == "*":
		return "", fmt.Errorf("%q matches every host; leave hosts out instead", s)
	case strings.HasPrefix(p, "."):
		return "", fmt.Errorf("%q is nginx's shorthand for a name and its subdomains; write both %q and %q", s, p[1:], "*"+p)
	case strings.Contains(name, "*"):
		return "", fmt.Errorf("%q: a wildcard is only a whole first label, as in \"*.example.org\"", s)
	}
	if err := checkDNSName(name); err != nil {
		return "", fmt.Errorf("%q: %v", s, err)
	}
	if wild {
		return "*." + name, nil
	}
	return name, nil
}

// checkDNSName reports why name (lower case) is not a host name.
func checkDNSName(name string) error {
	if name == "" {
		return fmt.Errorf("a host name is required")
	}
	if len(name) > maxHostName {
		return fmt.Errorf("a host name is at most %d bytes", maxHostName)
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" || len(label) > 63 {
			return fmt.Errorf("every label of a host name is 1 to 63 bytes")
		}
		for i := 0; i < len(label); i++ {
			if c := label[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("a host name holds letters, digits, \"-\", \"_\" and \".\" only")
			}
		}
	}
	return nil
}

// isIPv4 reports whether s has the shape of a dotted IPv4 address: digits
// and dots only, so it is checked as an address, not a name.
func isIPv4(s string) bool {
	return s != "" && strings.Trim(s, "0123456789.") == "" && strings.Contains(s, ".")
}

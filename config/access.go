package config

import (
	"net/netip"
	"strings"

	"github.com/hashicorp/hcl/v2"
)

// AccessRule is one entry of a route's `access` list, nginx's allow and
// deny: the first rule whose prefix holds the client's address decides.
type AccessRule struct {
	Allow bool
	// Prefix is the addresses the rule covers; the zero Prefix is "all".
	Prefix netip.Prefix
}

// Matches reports whether the rule covers the address a (IPv4-mapped IPv6
// addresses are taken as IPv4).
func (r AccessRule) Matches(a netip.Addr) bool {
	return !r.Prefix.IsValid() || r.Prefix.Contains(a.Unmap())
}

// Admits reports whether the access list admits address a: the first rule
// that matches decides. The decoder makes every list end with "all", so a
// non-empty list always decides; an empty one admits every address.
func Admits(rules []AccessRule, a netip.Addr) bool {
	for _, r := range rules {
		if r.Matches(a) {
			return r.Allow
		}
	}
	return len(rules) == 0
}

// routeOptionBlocks are the blocks of a route that are not its handler.
var routeOptionBlocks = map[string]bool{"basic_auth": true, "compress": true}

// handlerBlocks returns the blocks of a route's body that name its handler.
func handlerBlocks(blocks hcl.Blocks) hcl.Blocks {
	var hs hcl.Blocks
	for _, b := range blocks {
		if !routeOptionBlocks[b.Type] {
			hs = append(hs, b)
		}
	}
	return hs
}

// routeOptions decodes what a route adds around its handler: the access
// list, basic auth and the slash redirect.
func (d *decoder) routeOptions(content *hcl.BodyContent, name string, r *Route, cfg *Config) {
	d.access(content.Attributes, name, r)
	if a, ok := content.Attributes["slash_redirect"]; ok {
		boolAttr(d, content.Attributes, "slash_redirect", name+": slash_redirect", &r.SlashRedirect)
		if r.SlashRedirect && (r.Prefix == "/" || !strings.HasSuffix(r.Prefix, "/")) {
			d.errorf(a.Range, "Invalid value", "%s: slash_redirect answers the prefix without its trailing \"/\" with a redirect to it; it needs a prefix that ends in \"/\", such as \"/app/\".", name)
		}
	}
	for i, b := range content.Blocks.OfType("basic_auth") {
		if i > 0 {
			d.errorf(b.DefRange, "Duplicate basic_auth block", "%s has more than one basic_auth block.", name)
			continue
		}
		r.BasicAuth = d.basicAuth(b, name, r.Prefix, cfg.BaseDir)
	}
}

// access decodes a route's access list: "allow PREFIX" and "deny PREFIX"
// entries in order, the last one "allow all" or "deny all", so that what
// happens to the addresses no other entry names is written down (nginx
// allows them unless the list ends with `deny all`).
func (d *decoder) access(attrs hcl.Attributes, name string, r *Route) {
	entries, rngs := stringListAttr(d, attrs, "access", name+": access")
	a, present := attrs["access"]
	if !present {
		return
	}
	if len(entries) == 0 {
		d.errorf(a.Expr.Range(), "Invalid value", `%s: access lists rules such as ["allow 10.0.0.0/8", "deny all"]; leave it out to admit every address.`, name)
		return
	}
	var rules []AccessRule
	ok := true
	for i, e := range entries {
		verb, arg, _ := strings.Cut(strings.TrimSpace(e), " ")
		arg = strings.TrimSpace(arg)
		rule := AccessRule{Allow: verb == "allow"}
		if verb != "allow" && verb != "deny" {
			d.errorf(rngs[i], "Invalid value", `%s: access entries are "allow ADDRESS" or "deny ADDRESS" (an address, a CIDR prefix or "all"), got %q.`, name, e)
			ok = false
			continue
		}
		if arg != "all" {
			p, err := parsePrefix(arg)
			if err != nil {
				d.errorf(rngs[i], "Invalid value", "%s: access: %s.", name, err)
				ok = false
				continue
			}
			rule.Prefix = p
		} else if i < len(entries)-1 {
			d.errorf(rngs[i+1], "Unreachable access rule", "%s: access: %q follows %q, which matches every address; it is never reached.", name, entries[i+1], e)
			ok = false
		}
		rules = append(rules, rule)
	}
	if last := entries[len(entries)-1]; ok && rules[len(rules)-1].Prefix.IsValid() {
		d.errorf(rngs[len(rngs)-1], "Missing final access rule", `%s: access ends with %q; end it with "deny all" or "allow all" to say what every other address gets.`, name, last)
		ok = false
	}
	if ok {
		r.Access = rules
	}
}

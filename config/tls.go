package config

import (
	"fmt"
	"strings"

	"github.com/hashicorp/hcl/v2"
)

// TLS is a listener's `tls { certificate "NAME" { cert = "...", key = "..." } ... }`
// block. The supervisor reads the files (docs/DESIGN.md §9), and so do the
// host checks, with the same code (LoadKeyPair); the first
// certificate is the default for clients that send no server name, or one
// no certificate covers; otherwise the certificate whose names cover the
// client's server name (SNI) is chosen.
type TLS struct {
	Certificates []Certificate
}

// Certificate is one `certificate "NAME"` block: a PEM chain (leaf first)
// and its PEM private key (RSA or ECDSA), both resolved against BaseDir.
type Certificate struct {
	Name string
	Cert string
	Key  string
	// Where is the block's file:line, for errors found when the files are
	// read.
	Where string
}

var (
	listenerBlocks = []hcl.BlockHeaderSchema{{Type: "tls"}, {Type: "hsts"}, {Type: "headers"}}
	tlsSchema      = &hcl.BodySchema{
		Blocks: []hcl.BlockHeaderSchema{{Type: "certificate", LabelNames: []string{"name"}}},
	}
	certificateSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{{Name: "cert", Required: true}, {Name: "key", Required: true}},
	}
)

// tls decodes a listener's tls block.
func (d *decoder) tls(b *hcl.Block, listener, base string) *TLS {
	content, diags := b.Body.Content(tlsSchema)
	d.add(diags)
	t := &TLS{}
	ok := !diags.HasErrors()
	seen := map[string]hcl.Range{}
	for _, cb := range content.Blocks {
		name := cb.Labels[0]
		what := fmt.Sprintf("listener %q: tls: certificate %q", listener, name)
		if name == "" || hasCTL(name) {
			d.errorf(cb.LabelRanges[0], "Invalid certificate name", "listener %q: a certificate name must be non-empty and printable, got %q.", listener, name)
			ok = false
			continue
		}
		if first, dup := seen[name]; dup {
			d.errorf(cb.LabelRanges[0], "Duplicate certificate name", "%s is already defined at %s.", what, first)
			ok = false
			continue
		}
		seen[name] = cb.DefRange
		attrs := d.attrs(cb, certificateSchema)
		c := Certificate{Name: name, Where: fmt.Sprintf("%s:%d", cb.DefRange.Filename, cb.DefRange.Start.Line)}
		paths := true
		for _, f := range []struct {
			key string
			dst *string
		}{{"cert", &c.Cert}, {"key", &c.Key}} {
			s, rng, found := stringAttr(d, attrs, f.key, what+": "+f.key)
			switch {
			case !found:
				ok, paths = false, false
			case s == "" || strings.ContainsRune(s, 0):
				d.errorf(rng, "Invalid value", "%s: %s must be a file path, got %q.", what, f.key, s)
				ok, paths = false, false
			default:
				*f.dst = resolve(base, s)
			}
		}
		if paths && d.host != nil && d.host.certificates {
			d.checkCertificate(c, what, cb.DefRange)
		}
		t.Certificates = append(t.Certificates, c)
	}
	if len(content.Blocks) == 0 && !diags.HasErrors() {
		d.errorf(b.Body.MissingItemRange(), "Missing certificate block",
			`listener %q: tls needs at least one certificate block, such as: certificate "example.org" { cert = "example.org.pem", key = "example.org.key" }.`, listener)
		ok = false
	}
	if !ok {
		return nil
	}
	return t
}

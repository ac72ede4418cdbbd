package config

import (
	"net/url"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
)

var corsSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "allow_origins", Required: true},
		{Name: "allow_methods"},
		{Name: "allow_headers"},
		{Name: "expose_headers"},
		{Name: "allow_credentials"},
		{Name: "max_age"},
	},
}

// cors decodes the cors block.
func (d *decoder) cors(b *hcl.Block) *CORS {
	attrs := d.attrs(b, corsSchema)
	c := &CORS{AllowMethods: []string{"GET", "HEAD", "POST"}, MaxAge: 10 * time.Minute}
	origins, rngs := stringListAttr(d, attrs, "allow_origins", "cors.allow_origins")
	for i, o := range origins {
		if o != "*" && !validOrigin(o) {
			d.errorf(rngs[i], "Invalid value", `cors.allow_origins: %q is not "*" or an origin such as "https://app.example:8443".`, o)
			continue
		}
		c.AllowOrigins = append(c.AllowOrigins, o)
	}
	tokens := func(key string, dst *[]string) {
		ss, rngs := stringListAttr(d, attrs, key, "cors."+key)
		if _, set := attrs[key]; set {
			*dst = nil
		}
		for i, s := range ss {
			if !isToken(s) {
				d.errorf(rngs[i], "Invalid value", "cors.%s: %q is not an HTTP token.", key, s)
				continue
			}
			*dst = append(*dst, s)
		}
	}
	tokens("allow_methods", &c.AllowMethods)
	tokens("allow_headers", &c.AllowHeaders)
	tokens("expose_headers", &c.ExposeHeaders)
	boolAttr(d, attrs, "allow_credentials", "cors.allow_credentials", &c.AllowCredentials)
	durationAttr(d, attrs, "max_age", "cors.max_age", 0, 24*time.Hour, &c.MaxAge)
	if c.AllowCredentials && c.AllowsAnyOrigin() {
		// Fetch forbids credentials with a wildcard origin; echoing any
		// Origin instead would hand every site the user's credentials.
		d.errorf(attrs["allow_credentials"].Range, "Invalid value",
			`cors.allow_credentials cannot be true with allow_origins = ["*"]; list the origins instead.`)
	}
	return c
}

// validOrigin reports whether s is a serialized origin: scheme://host[:port].
func validOrigin(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" &&
		u.Path == "" && u.RawQuery == "" && u.Fragment == "" && u.User == nil &&
		!hasCTL(s) && !strings.ContainsAny(s, " \t")
}

// isToken reports whether s is an RFC 9110 token.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

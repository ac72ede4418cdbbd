package config

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/gatehouse-dev/gatehouse/sandbox"
	"github.com/hashicorp/hcl/v2"
	"golang.org/x/crypto/bcrypt"
)

// BasicAuth is a route's `basic_auth` block: HTTP Basic authentication
// (RFC 7617) against an htpasswd file of bcrypt hashes, nginx's auth_basic
// and auth_basic_user_file.
type BasicAuth struct {
	// Realm is sent in WWW-Authenticate (default "restricted").
	Realm string
	// File is the htpasswd file, absolute and clean. The supervisor reads
	// it at start and on every reload; workers, which cannot open it, get
	// its entries in Hello.
	File string
	// FailClass is the rate limit class a failed attempt is charged to, so
	// that guessing is throttled; default the class of the route's prefix,
	// "" when there is none (a warning).
	FailClass string
	// Users are the file's entries in its order. Parse fills them when it
	// runs the host checks; a worker, which skips them, sets them from
	// Hello (SetHtpasswd).
	Users []HtpasswdUser
}

// HtpasswdUser is one line of an htpasswd file.
type HtpasswdUser struct {
	Name string
	Hash string // bcrypt, "$2a$", "$2b$" or "$2y$"
}

// MaxHtpasswdBytes bounds the htpasswd entries of all routes together: they
// ride in the workers' Hello, one frame under ipc.MaxFrameSize (64 KiB)
// beside the configuration file and the certificates. About 400 users.
const MaxHtpasswdBytes = 32 << 10

// defaultRealm is the realm of a basic_auth block that names none.
const defaultRealm = "restricted"

var basicAuthSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
	{Name: "htpasswd", Required: true}, {Name: "realm"}, {Name: "fail_class"},
}}

// authRef is a basic_auth block, checked once the rate limit classes are
// known.
type authRef struct {
	auth         *BasicAuth
	route        string
	prefix       string
	file, class  hcl.Range
	classPresent bool
}

func (d *decoder) basicAuth(b *hcl.Block, route, prefix, base string) *BasicAuth {
	attrs := d.attrs(b, basicAuthSchema)
	a := &BasicAuth{Realm: defaultRealm}
	ref := authRef{auth: a, route: route, prefix: prefix}
	if realm, rng, ok := stringAttr(d, attrs, "realm", route+": basic_auth.realm"); ok {
		// It is sent as a quoted-string (RFC 9110 §5.6.4).
		if realm == "" || hasCTL(realm) || strings.ContainsAny(realm, "\"\\") {
			d.errorf(rng, "Invalid value", "%s: basic_auth.realm is a non-empty text without quotes, backslashes or control characters, got %q.", route, realm)
			return nil
		}
		a.Realm = realm
	}
	if class, rng, ok := stringAttr(d, attrs, "fail_class", route+": basic_auth.fail_class"); ok {
		a.FailClass, ref.class, ref.classPresent = class, rng, true
	}
	file, rng, ok := stringAttr(d, attrs, "htpasswd", route+": basic_auth.htpasswd")
	if !ok {
		return nil
	}
	if file == "" || strings.ContainsRune(file, 0) {
		d.errorf(rng, "Invalid value", "%s: basic_auth.htpasswd must be a file path, got %q.", route, file)
		return nil
	}
	a.File, ref.file = resolve(base, file), rng
	if d.host != nil {
		data, err := sandbox.ReadFileAs(d.host.keysAs, a.File)
		if err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			who := "the supervisor"
			if d.host.keysAs != nil {
				who = "the supervisor's account " + d.host.keysAs.String() + ", which reads it again on reload,"
			}
			d.errorf(rng, "Unreadable htpasswd file", "%s: basic_auth.htpasswd %q cannot be read by %s: %v.", route, a.File, who, err)
			return nil
		}
		users, err := ParseHtpasswd(data, a.File)
		if err != nil {
			d.errorf(rng, "Invalid htpasswd file", "%s: basic_auth.htpasswd: %v.", route, err)
			return nil
		}
		a.Users = users
	}
	d.auths = append(d.auths, ref)
	return a
}

// ParseHtpasswd parses an htpasswd file read from path (named in errors,
// with the line): "NAME:HASH" lines, blank lines and "#" comments. Only
// bcrypt hashes (`htpasswd -B`) are accepted: the others Apache writes are
// MD5 (apr1), SHA-1 or crypt(3), all fast enough to guess offline.
func ParseHtpasswd(data []byte, path string) ([]HtpasswdUser, error) {
	var users []HtpasswdUser
	seen := map[string]int{}
	for n, line := range bytes.Split(data, []byte("\n")) {
		lineNo := n + 1
		s := strings.TrimSpace(string(bytes.TrimSuffix(line, []byte("\r"))))
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		name, hash, ok := strings.Cut(s, ":")
		switch {
		case !ok || name == "":
			return nil, fmt.Errorf("%s:%d: not a NAME:HASH line", path, lineNo)
		case hasCTL(name):
			return nil, fmt.Errorf("%s:%d: the user name holds a control character", path, lineNo)
		}
		if first, dup := seen[name]; dup {
			return nil, fmt.Errorf("%s:%d: user %q is already defined on line %d", path, lineNo, name, first)
		}
		if kind := hashKind(hash); kind != "" {
			return nil, fmt.Errorf("%s:%d: user %q has a %s hash; only bcrypt is accepted: write it with `htpasswd -B`", path, lineNo, name, kind)
		}
		if _, err := bcrypt.Cost([]byte(hash)); err != nil {
			return nil, fmt.Errorf("%s:%d: user %q: the bcrypt hash is malformed: %v", path, lineNo, name, err)
		}
		seen[name] = lineNo
		users = append(users, HtpasswdUser{Name: name, Hash: hash})
	}
	if len(users) == 0 {
		return nil, fmt.Errorf("%s: no users", path)
	}
	return users, nil
}

// hashKind names the kind of a hash that is not bcrypt, or returns "".
func hashKind(h string) string {
	switch {
	case strings.HasPrefix(h, "$2a$"), strings.HasPrefix(h, "$2b$"), strings.HasPrefix(h, "$2y$"):
		return ""
	case strings.HasPrefix(h, "$apr1$"):
		return "MD5 (apr1)"
	case strings.HasPrefix(h, "{SHA}"):
		return "SHA-1"
	case strings.HasPrefix(h, "$1$"):
		return "MD5-crypt"
	case strings.HasPrefix(h, "$5$"), strings.HasPrefix(h, "$6$"):
		return "SHA-crypt"
	case strings.HasPrefix(h, "$"):
		return "unknown"
	}
	return "crypt(3) or plain text"
}

// checkAuths resolves each basic_auth's fail_class against the rate limit
// classes and checks that the htpasswd entries fit the workers' Hello.
func (d *decoder) checkAuths(cfg *Config) {
	total := 0
	for _, ref := range d.auths {
		a := ref.auth
		switch {
		case ref.classPresent && cfg.RateLimitByName(a.FailClass) == nil:
			d.errorf(ref.class, "Unknown rate limit class", "%s: basic_auth.fail_class %q names no rate_limit block.", ref.route, a.FailClass)
		case !ref.classPresent:
			if rl := cfg.RateClass(ref.prefix); rl != nil {
				a.FailClass = rl.Name
			} else {
				d.warnf(ref.file, "Unthrottled basic auth", "%s: no rate_limit class throttles failed logins; add a rate_limit block and name it in basic_auth.fail_class.", ref.route)
			}
		}
		for _, u := range a.Users {
			// The entry's bytes and their protobuf framing.
			total += len(u.Name) + len(u.Hash) + 8
		}
		if total > MaxHtpasswdBytes {
			d.errorf(ref.file, "Too many htpasswd entries", "%s: the htpasswd entries of all routes come to over %d bytes, the most the workers' configuration frame carries (about 400 users); split them or use an embedded handler for a large user base.", ref.route, MaxHtpasswdBytes)
			return
		}
	}
}

// SetHtpasswd gives each route's basic_auth the entries of its file from
// files (by File): how a worker, which cannot read the files, gets them.
func (c *Config) SetHtpasswd(files map[string][]HtpasswdUser) error {
	for _, r := range c.Routes {
		if r.BasicAuth == nil {
			continue
		}
		users, ok := files[r.BasicAuth.File]
		if !ok {
			return fmt.Errorf("route %q: no entries for htpasswd file %q", r.Prefix, r.BasicAuth.File)
		}
		r.BasicAuth.Users = users
	}
	return nil
}

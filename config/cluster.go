package config

import (
	"errors"
	"io/fs"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gatehouse-dev/gatehouse/sandbox"
	"github.com/hashicorp/hcl/v2"
)

// Cluster is the optional `cluster` block: a Redis-protocol store (Redis,
// Valkey) that several gatehouse instances behind one balancer share their
// TLS session ticket keys, rate-limit buckets and penalties through. It
// holds paths, never secrets: the password and the ticket secret are read
// from their files by the supervisor, so the file text, which every worker
// gets, names no secret.
type Cluster struct {
	// Address is the store's host:port.
	Address string
	// DB is the logical database (a redis:// URL's path), default 0.
	DB int
	// TLS makes the connection to the store TLS (rediss:// or tls = true).
	TLS bool
	// TLSCAFile, when set, holds the CA certificates the store's
	// certificate is checked against instead of the system's.
	TLSCAFile string
	// TLSServerName is the name checked in the store's certificate
	// (default: Address's host).
	TLSServerName string
	// User is the ACL user ("" : the default user).
	User string
	// PasswordFile holds the password ("": none); trailing newlines are
	// not part of it.
	PasswordFile string
	// SecretFile holds the shared secret, at least 32 bytes, that the ticket
	// keys are encrypted with in the store. Unset, ticket keys are not
	// shared and each instance keeps its own.
	SecretFile string
	// KeyPrefix starts every key gatehouse writes (default "gatehouse:").
	KeyPrefix string
	// Instance names this instance in the store and the logs; "" stands
	// for the host name, which the supervisor reads (a sandboxed worker
	// re-parsing the file may not).
	Instance string
	// StoreTimeout is the longest a request waits for the store's rate
	// decision before the local bucket decides (1ms..1s, default 5ms).
	StoreTimeout time.Duration
}

// DefaultStoreTimeout is cluster.store_timeout's default.
const DefaultStoreTimeout = 5 * time.Millisecond

// MinClusterSecret is the fewest bytes cluster.secret_file may hold.
const MinClusterSecret = 32

var clusterSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "address", Required: true}, {Name: "tls"}, {Name: "tls_ca_file"}, {Name: "tls_server_name"},
		{Name: "user"}, {Name: "password_file"}, {Name: "secret_file"}, {Name: "key_prefix"}, {Name: "instance"},
		{Name: "store_timeout"},
	},
}

func (d *decoder) cluster(b *hcl.Block, base string) *Cluster {
	attrs := d.attrs(b, clusterSchema)
	c := &Cluster{KeyPrefix: "gatehouse:", StoreTimeout: DefaultStoreTimeout}
	if s, rng, ok := stringAttr(d, attrs, "address", "cluster.address"); ok {
		d.clusterAddress(c, s, rng)
	}
	if _, ok := attrs["tls"]; ok {
		tls := false
		boolAttr(d, attrs, "tls", "cluster.tls", &tls)
		c.TLS = c.TLS || tls
	}
	c.TLSCAFile = d.clusterFile(attrs, "tls_ca_file", base, 0)
	if s, rng, ok := stringAttr(d, attrs, "tls_server_name", "cluster.tls_server_name"); ok {
		if s == "" || hasCTL(s) || strings.ContainsAny(s, " /") {
			d.errorf(rng, "Invalid value", "cluster.tls_server_name must be a host name, got %q.", s)
		}
		c.TLSServerName = s
	}
	if s, rng, ok := stringAttr(d, attrs, "user", "cluster.user"); ok {
		if s == "" || hasCTL(s) || strings.ContainsAny(s, " ") {
			d.errorf(rng, "Invalid value", "cluster.user must be an ACL user name, got %q.", s)
		}
		c.User = s
	}
	c.PasswordFile = d.clusterFile(attrs, "password_file", base, 1)
	c.SecretFile = d.clusterFile(attrs, "secret_file", base, MinClusterSecret)
	if s, rng, ok := stringAttr(d, attrs, "key_prefix", "cluster.key_prefix"); ok {
		if len(s) > 64 || hasCTL(s) || strings.ContainsAny(s, " *?[]") {
			d.errorf(rng, "Invalid value", "cluster.key_prefix must be at most 64 bytes with no space, control character or glob pattern character, got %q.", s)
		}
		c.KeyPrefix = s
	}
	if s, rng, ok := stringAttr(d, attrs, "instance", "cluster.instance"); ok {
		if s == "" || len(s) > 64 || hasCTL(s) || strings.ContainsAny(s, " ") {
			d.errorf(rng, "Invalid value", "cluster.instance must be a name of 1 to 64 bytes with no space or control character, got %q.", s)
		}
		c.Instance = s
	}
	durationAttr(d, attrs, "store_timeout", "cluster.store_timeout", time.Millisecond, time.Second, &c.StoreTimeout)
	return c
}

// clusterAddress sets c's address from "host:port" or a redis:// or
// rediss:// URL, which may name a database but no credentials: those would
// be in the file every worker gets.
func (d *decoder) clusterAddress(c *Cluster, s string, rng hcl.Range) {
	hostport := s
	if strings.Contains(s, "://") {
		u, err := url.Parse(s)
		switch {
		case err != nil:
			d.errorf(rng, "Invalid value", "cluster.address: %v.", err)
			return
		case u.Scheme != "redis" && u.Scheme != "rediss":
			d.errorf(rng, "Invalid value", "cluster.address must be host:port or a redis:// or rediss:// URL, got scheme %q.", u.Scheme)
			return
		case u.User != nil:
			d.errorf(rng, "Invalid value", "cluster.address must not hold credentials: they would be in the file every worker gets; use cluster.user and cluster.password_file.")
			return
		case u.RawQuery != "" || u.Fragment != "":
			d.errorf(rng, "Invalid value", "cluster.address takes no query or fragment, got %q.", s)
			return
		}
		if p := strings.TrimPrefix(u.Path, "/"); p != "" {
			db, err := strconv.Atoi(p)
			if err != nil || db < 0 || db > 15 {
				d.errorf(rng, "Invalid value", "cluster.address: the database must be 0 to 15, got %q.", p)
				return
			}
			c.DB = db
		}
		c.TLS = u.Scheme == "rediss"
		hostport = u.Host
		if u.Port() == "" {
			hostport = net.JoinHostPort(u.Hostname(), "6379")
		}
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil || host == "" {
		d.errorf(rng, "Invalid value", "cluster.address must be host:port or a redis:// or rediss:// URL, got %q.", s)
		return
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		d.errorf(rng, "Invalid value", "cluster.address: the port must be 1 to 65535, got %q.", port)
		return
	}
	c.Address = hostport
}

// clusterFile resolves the path attribute key and, with the host checks,
// checks that the supervisor's account can read it and that it holds at
// least min bytes (its content is not kept).
func (d *decoder) clusterFile(attrs hcl.Attributes, key, base string, min int) string {
	name := "cluster." + key
	s, rng, ok := stringAttr(d, attrs, key, name)
	if !ok {
		return ""
	}
	if s == "" || strings.ContainsRune(s, 0) {
		d.errorf(rng, "Invalid value", "%s must be a file path, got %q.", name, s)
		return ""
	}
	p := resolve(base, s)
	if d.host == nil {
		return p
	}
	data, err := sandbox.ReadFileAs(d.host.keysAs, p)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		d.errorf(rng, "Unreadable file", "%s %q cannot be read by the supervisor: %v.", name, p, err)
		return p
	}
	if n := len(strings.TrimRight(string(data), "\r\n")); n < min {
		d.errorf(rng, "Invalid file", "%s %q holds %d bytes, fewer than the %d it needs.", name, p, n, min)
	}
	clear(data)
	return p
}

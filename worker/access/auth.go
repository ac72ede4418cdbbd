package access

import (
	"context"
	"crypto/sha256"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/gatehouse-dev/gatehouse/config"
	"golang.org/x/crypto/bcrypt"
)

// Basic auth (RFC 7617) against a route's htpasswd entries, checked in the
// worker: bcrypt is deliberately slow (about 2^cost rounds: a few ms at
// `htpasswd -B`'s cost 5, some 50 ms at 10), and that CPU is spent here, in
// the sandbox, never in the supervisor's loop. Two bounded tables keep it
// in check: credentials that verified are remembered (browsers send them
// with every request), and a client whose failures ran out its fail_class
// bucket is answered 429 without a bcrypt run until the supervisor's
// Retry-After has passed. The bucket is the supervisor's, asked before
// every bcrypt run, so that it bounds a client's guesses at all workers
// together.

// Bounds of a BasicAuth's tables; at the bound a table is emptied, which
// costs the next requests a bcrypt run each, never a wrong answer.
const (
	maxVerifiedCredentials = 1024
	maxThrottledClients    = 4096
)

// BasicAuth is one route's basic_auth. Its configuration fields are
// immutable; mu guards the tables.
type BasicAuth struct {
	challenge string            // the WWW-Authenticate value
	users     map[string][]byte // name → bcrypt hash
	// decoy is a hash compared for an unknown user, so that the answer
	// takes as long as for a known one and does not tell them apart.
	decoy     []byte
	failClass string // the rate limit class a failure is charged to, or ""

	mu sync.Mutex
	// verified holds SHA-256(client, name, password, hash) of credentials that
	// verified; throttled holds, per client, when its fail_class bucket
	// has a token again.
	verified  map[[32]byte]struct{}
	throttled map[netip.Addr]time.Time
}

// NewBasicAuth readies a route's basic_auth block, its Users filled.
func NewBasicAuth(cfg *config.BasicAuth) *BasicAuth {
	a := &BasicAuth{
		challenge: `Basic realm="` + cfg.Realm + `"`,
		users:     make(map[string][]byte, len(cfg.Users)),
		failClass: cfg.FailClass,
		verified:  map[[32]byte]struct{}{},
		throttled: map[netip.Addr]time.Time{},
	}
	for _, u := range cfg.Users {
		a.users[u.Name] = []byte(u.Hash)
	}
	if len(cfg.Users) > 0 {
		a.decoy = []byte(cfg.Users[0].Hash)
	}
	return a
}

// remembered reports whether name and password verified before for
// client. Remembered per client: another client's entry would let one over
// its class learn, without a check, that its guess is right.
func (a *BasicAuth) remembered(client netip.Addr, name, password string) bool {
	hash, known := a.users[name]
	if !known {
		return false
	}
	key := credentialKey(client, name, password, hash)
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.verified[key]
	return ok
}

// verify runs bcrypt: it reports whether name and password match an
// entry, and remembers them for client if they do.
func (a *BasicAuth) verify(client netip.Addr, name, password string) bool {
	hash, known := a.users[name]
	if !known {
		hash = a.decoy
	}
	if hash == nil || bcrypt.CompareHashAndPassword(hash, []byte(password)) != nil || !known {
		return false
	}
	a.mu.Lock()
	if len(a.verified) >= maxVerifiedCredentials {
		clear(a.verified)
	}
	a.verified[credentialKey(client, name, password, hash)] = struct{}{}
	a.mu.Unlock()
	return true
}

// credentialKey is what verified remembers of a credential: a digest tied
// to the client and the entry's hash, so that a changed entry never matches.
func credentialKey(client netip.Addr, name, password string, hash []byte) [32]byte {
	h := sha256.New()
	h.Write(client.AsSlice())
	h.Write([]byte(strconv.Itoa(len(name))))
	h.Write([]byte{':'})
	h.Write([]byte(name))
	h.Write([]byte(strconv.Itoa(len(password))))
	h.Write([]byte{':'})
	h.Write([]byte(password))
	h.Write(hash)
	var k [32]byte
	h.Sum(k[:0])
	return k
}

// throttledFor returns how long client stays refused, or 0.
func (a *BasicAuth) throttledFor(client netip.Addr, now time.Time) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	until, ok := a.throttled[client]
	if !ok {
		return 0
	}
	if d := until.Sub(now); d > 0 {
		return d
	}
	delete(a.throttled, client)
	return 0
}

func (a *BasicAuth) throttle(client netip.Addr, until time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.throttled) >= maxThrottledClients {
		clear(a.throttled)
	}
	a.throttled[client] = until
}

// Charge charges a failed attempt to the rate limit class at the
// supervisor, against the key it derives itself; with peek it charges
// nothing and asks whether the client has a token left. refused reports
// that the client is over the class, retryAfter how long until it has a
// token again; a charge that could not be made refuses nothing.
type Charge func(ctx context.Context, class string, peek bool) (retryAfter time.Duration, refused bool)

// Refusal is the answer to a request the access phase refuses, which the
// caller writes (as a handler would, the connection kept): its status, the
// one header field that goes with it and a text body. The zero Refusal
// admits the request.
type Refusal struct {
	Status       int
	Field, Value string
	Text         string
}

// Authorize refuses a request without valid credentials: 401 with the
// challenge, or 429 once the client's failures ran out its fail_class
// bucket. Each failure (credentials sent that do not verify) is charged to
// that class by charge, and before a bcrypt run charge is asked whether a
// token is left: a client over its class learns nothing of its guess at any
// worker. It returns the zero Refusal when the request may go on.
func (a *BasicAuth) Authorize(ctx context.Context, req *http.Request, client netip.Addr, charge Charge) Refusal {
	name, password, sent := req.BasicAuth()
	if sent {
		if d := a.throttledFor(client, time.Now()); d > 0 {
			return tooManyAttempts(d)
		}
		if a.remembered(client, name, password) {
			return Refusal{}
		}
		if ref, refused := a.ask(ctx, client, charge, true); refused {
			return ref
		}
		if a.verify(client, name, password) {
			return Refusal{}
		}
		if ref, refused := a.ask(ctx, client, charge, false); refused {
			return ref
		}
	}
	return Refusal{Status: http.StatusUnauthorized, Field: "Www-Authenticate", Value: a.challenge, Text: "401 unauthorized"}
}

// ask peeks at or charges the fail_class bucket, and throttles client
// when it is empty.
func (a *BasicAuth) ask(ctx context.Context, client netip.Addr, charge Charge, peek bool) (Refusal, bool) {
	if a.failClass == "" {
		return Refusal{}, false
	}
	d, refused := charge(ctx, a.failClass, peek)
	if !refused {
		return Refusal{}, false
	}
	d = max(d, time.Second)
	a.throttle(client, time.Now().Add(d))
	return tooManyAttempts(d), true
}

// tooManyAttempts is 429 with Retry-After in whole seconds.
func tooManyAttempts(d time.Duration) Refusal {
	return Refusal{Status: http.StatusTooManyRequests, Field: "Retry-After", Value: strconv.FormatInt(max(int64((d+time.Second-1)/time.Second), 1), 10), Text: "429 too many failed logins"}
}

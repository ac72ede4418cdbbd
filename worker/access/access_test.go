package access

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/config"
	"golang.org/x/crypto/bcrypt"
)

func TestClientAddr(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	for _, tc := range []struct {
		peer string
		xff  []string
		want string
	}{
		{"192.0.2.1:5000", []string{"198.51.100.7"}, "192.0.2.1"}, // untrusted peer: its header is ignored
		{"[::ffff:192.0.2.1]:5000", nil, "192.0.2.1"},
		{"10.0.0.1:5000", nil, "10.0.0.1"},
		{"10.0.0.1:5000", []string{"198.51.100.7"}, "198.51.100.7"},
		{"10.0.0.1:5000", []string{"203.0.113.9, 198.51.100.7, 10.0.0.2"}, "198.51.100.7"},
		{"10.0.0.1:5000", []string{"203.0.113.9", "198.51.100.7"}, "198.51.100.7"},
		{"10.0.0.1:5000", []string{"203.0.113.9, junk"}, "10.0.0.1"},
		{"10.0.0.1:5000", []string{"10.0.0.3, 10.0.0.2"}, "10.0.0.1"},
		{"", nil, "invalid IP"},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tc.peer
		for _, v := range tc.xff {
			r.Header.Add("X-Forwarded-For", v)
		}
		if got := ClientAddr(r, trusted).String(); got != tc.want {
			t.Errorf("peer %s, X-Forwarded-For %q: client %s, want %s", tc.peer, tc.xff, got, tc.want)
		}
	}
}

// TestBasicAuthTables checks the verified table, the peek before a bcrypt
// run, the charge of a failure and the throttle a refusal leaves: a refused
// client gets 429 without a bcrypt run or another call until its time, and
// no other client does; a client over its class at the supervisor gets 429
// at a worker that never saw it, right credentials included.
func TestBasicAuthTables(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret:x"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &config.BasicAuth{Realm: "staff only", FailClass: "login", Users: []config.HtpasswdUser{{Name: "alice", Hash: string(hash)}}}
	a := NewBasicAuth(cfg)
	charges, peeks, refuse := 0, 0, false
	charge := func(_ context.Context, class string, peek bool) (time.Duration, bool) {
		if class != "login" {
			t.Errorf("charged to %q, want login", class)
		}
		if peek {
			peeks++
		} else {
			charges++
		}
		return 2500 * time.Millisecond, refuse
	}
	try := func(a *BasicAuth, client, user, pass string) (*httptest.ResponseRecorder, bool) {
		r := httptest.NewRequest("GET", "/", nil)
		r.SetBasicAuth(user, pass)
		rec := httptest.NewRecorder()
		ref := a.Authorize(context.Background(), r, netip.MustParseAddr(client), charge)
		if ref.Status != 0 {
			rec.Header().Set(ref.Field, ref.Value)
			http.Error(rec, ref.Text, ref.Status)
		}
		return rec, ref.Status == 0
	}
	for range 2 {
		if _, ok := try(a, "192.0.2.1", "alice", "s3cret:x"); !ok {
			t.Fatal("valid credentials refused")
		}
	}
	if len(a.verified) != 1 || peeks != 1 || charges != 0 {
		t.Errorf("%d verified credentials remembered, %d peeks, %d charges; want 1, 1, 0", len(a.verified), peeks, charges)
	}
	rec, ok := try(a, "192.0.2.1", "alice", "wrong")
	if ok || rec.Code != http.StatusUnauthorized || rec.Header().Get("Www-Authenticate") != `Basic realm="staff only"` || peeks != 2 || charges != 1 {
		t.Errorf("wrong password: admitted %v, %d, WWW-Authenticate %q, %d peeks, %d charges", ok, rec.Code, rec.Header().Get("Www-Authenticate"), peeks, charges)
	}
	refuse = true
	rec, ok = try(a, "192.0.2.1", "alice", "wrong")
	if ok || rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "3" || peeks != 3 || charges != 1 {
		t.Errorf("refused peek: admitted %v, %d, Retry-After %q, %d peeks, %d charges", ok, rec.Code, rec.Header().Get("Retry-After"), peeks, charges)
	}
	rec, ok = try(a, "192.0.2.1", "alice", "s3cret:x")
	if ok || rec.Code != http.StatusTooManyRequests || peeks != 3 || charges != 1 {
		t.Errorf("throttled client: admitted %v, %d, %d peeks, %d charges", ok, rec.Code, peeks, charges)
	}
	// Another worker, which never refused this client.
	b := NewBasicAuth(cfg)
	if rec, ok := try(b, "192.0.2.1", "alice", "s3cret:x"); ok || rec.Code != http.StatusTooManyRequests || len(b.verified) != 0 {
		t.Errorf("client over its class at a fresh worker: admitted %v, %d, %d verified", ok, rec.Code, len(b.verified))
	}
	// Credentials another client verified here tell a client over its
	// class nothing.
	if rec, ok := try(a, "192.0.2.3", "alice", "s3cret:x"); ok || rec.Code != http.StatusTooManyRequests {
		t.Errorf("client over its class with credentials another verified here: admitted %v, %d", ok, rec.Code)
	}
	refuse = false
	if _, ok := try(a, "192.0.2.2", "alice", "s3cret:x"); !ok {
		t.Error("another client was throttled")
	}
}

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

// TestBasicAuthTables checks the verified table, the charge of a failure
// and the throttle it leaves: a refused client gets 429 without a bcrypt
// run or another charge until its time, and no other client does.
func TestBasicAuthTables(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret:x"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	a := NewBasicAuth(&config.BasicAuth{Realm: "staff only", FailClass: "login", Users: []config.HtpasswdUser{{Name: "alice", Hash: string(hash)}}})
	charges, refuse := 0, false
	charge := func(_ context.Context, class string) (time.Duration, bool) {
		if class != "login" {
			t.Errorf("charged to %q, want login", class)
		}
		charges++
		return 2500 * time.Millisecond, refuse
	}
	try := func(client, user, pass string) (*httptest.ResponseRecorder, bool) {
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
		if _, ok := try("192.0.2.1", "alice", "s3cret:x"); !ok {
			t.Fatal("valid credentials refused")
		}
	}
	if len(a.verified) != 1 {
		t.Errorf("%d verified credentials remembered, want 1", len(a.verified))
	}
	rec, ok := try("192.0.2.1", "alice", "wrong")
	if ok || rec.Code != http.StatusUnauthorized || rec.Header().Get("Www-Authenticate") != `Basic realm="staff only"` || charges != 1 {
		t.Errorf("wrong password: admitted %v, %d, WWW-Authenticate %q, %d charges", ok, rec.Code, rec.Header().Get("Www-Authenticate"), charges)
	}
	refuse = true
	rec, ok = try("192.0.2.1", "alice", "wrong")
	if ok || rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "3" || charges != 2 {
		t.Errorf("refused charge: admitted %v, %d, Retry-After %q, %d charges", ok, rec.Code, rec.Header().Get("Retry-After"), charges)
	}
	rec, ok = try("192.0.2.1", "alice", "s3cret:x")
	if ok || rec.Code != http.StatusTooManyRequests || charges != 2 {
		t.Errorf("throttled client: admitted %v, %d, %d charges", ok, rec.Code, charges)
	}
	if _, ok := try("192.0.2.2", "alice", "s3cret:x"); !ok {
		t.Error("another client was throttled")
	}
}

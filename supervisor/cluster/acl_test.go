package cluster

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/hashicorp/go-hclog"
	"github.com/redis/go-redis/v9"
)

// readmeACL is the ACL the README gives gatehouse's user, for the prefix
// "test:": everything gatehouse does must work under it, and nothing
// outside the prefix.
const readmeACL = "on >s3cret-pw ~test:* &test:* +@read +@write +@scripting +@pubsub +ping +time +scan -@dangerous"

// A user confined by the README's ACL, its password read from a file, can
// do all gatehouse does; a wrong password keeps the store down.
func TestACLUser(t *testing.T) {
	r := startRedis(t)
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: r.Addr()})
	defer admin.Close()
	if err := admin.Do(ctx, append([]any{"ACL", "SETUSER", "gh"}, toAny(strings.Fields(readmeACL))...)...).Err(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pass := filepath.Join(dir, "pass")
	if err := os.WriteFile(pass, []byte("s3cret-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := &config.Cluster{Address: r.Addr(), User: "gh", PasswordFile: pass, KeyPrefix: "test:", Instance: "a",
		SecretFile: secretFile(t, "0123456789abcdef0123456789abcdef-acl")}
	msgs := make(chan any, 1024)
	s, err := Start(cfg, hclog.NewNullLogger(), func(m any) { msgs <- m })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// The keys are read while connecting, before the link is reported up.
	waitFor(t, msgs, func(m any) bool { _, ok := m.(TicketKeys); return ok })
	if st := waitFor(t, msgs, func(m any) bool { _, ok := m.(State); return ok }).(State); !st.Up {
		t.Fatalf("under the ACL: %+v", st)
	}
	if got := rate(t, s, msgs, 1, "192.0.2.1"); !got.Allowed {
		t.Fatalf("rate under the ACL: %+v", got)
	}
	s.Penalize(netip.MustParseAddr("192.0.2.2"), time.Minute)
	deadline := time.Now().Add(5 * time.Second)
	for admin.Exists(ctx, "test:pen:192.0.2.2").Val() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the penalty was not written under the ACL")
		}
		time.Sleep(10 * time.Millisecond)
	}

	if err := os.WriteFile(pass, []byte("wrong\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	msgs2 := make(chan any, 1024)
	s2, err := Start(&config.Cluster{Address: r.Addr(), User: "gh", PasswordFile: pass, KeyPrefix: "test:", Instance: "b"}, hclog.NewNullLogger(), func(m any) { msgs2 <- m })
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	st := waitFor(t, msgs2, func(m any) bool { _, ok := m.(State); return ok }).(State)
	if st.Up || strings.Contains(st.Err, "wrong") || strings.Contains(st.Err, "s3cret") {
		t.Fatalf("with a wrong password: %+v (the error must not carry a password)", st)
	}
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

package cluster

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/hashicorp/go-hclog"
)

// ticketStore starts a Store sharing ticket keys under the secret in
// secretFile.
func ticketStore(t *testing.T, r *redisServer, instance, secretFile string) (*Store, chan any) {
	t.Helper()
	msgs := make(chan any, 1024)
	s, err := Start(&config.Cluster{Address: r.Addr(), KeyPrefix: "test:", Instance: instance, SecretFile: secretFile},
		hclog.NewNullLogger(), func(m any) { msgs <- m })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, msgs
}

func secretFile(t *testing.T, secret string) string {
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Two instances with the same secret get the same keys; the store holds
// them sealed; an instance with another secret gets none.
func TestTicketKeysShared(t *testing.T) {
	r := startRedis(t)
	secret := secretFile(t, "0123456789abcdef0123456789abcdef-shared")
	a, am := ticketStore(t, r, "a", secret)
	_, bm := ticketStore(t, r, "b", secret)
	isKeys := func(m any) bool { _, ok := m.(TicketKeys); return ok }
	ka := waitFor(t, am, isKeys).(TicketKeys)
	kb := waitFor(t, bm, isKeys).(TicketKeys)
	if len(ka.Keys) != 1 || len(ka.Keys[0]) != 32 || !sameKeys(ka.Keys, kb.Keys) {
		t.Fatalf("a got %d keys, b %d, the same: %v", len(ka.Keys), len(kb.Keys), sameKeys(ka.Keys, kb.Keys))
	}
	blob, err := a.rdb.Get(context.Background(), "test:tickets").Bytes()
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(blob, ka.Keys[0]) || bytes.Contains(blob, ka.Keys[0][:8]) {
		t.Fatal("the store holds the ticket key in the clear")
	}
	holder, _ := a.rdb.Get(context.Background(), "test:tickets:lease").Result()
	if holder != "a" && holder != "b" {
		t.Fatalf("lease held by %q", holder)
	}

	_, cm := ticketStore(t, r, "c", secretFile(t, "another secret of at least thirty-two bytes"))
	waitFor(t, cm, func(m any) bool { st, ok := m.(State); return ok && st.Up })
	select {
	case m := <-cm:
		if k, ok := m.(TicketKeys); ok {
			t.Fatalf("an instance with another secret got keys %d", len(k.Keys))
		}
	case <-time.After(1500 * time.Millisecond):
	}
}

// Rotation by the leaseholder: the new key is handed second (decrypt only)
// until it takes over, then first; the previous stays accepted.
func TestTicketKeysRotate(t *testing.T) {
	r := startRedis(t)
	secret := secretFile(t, "0123456789abcdef0123456789abcdef-rotate")
	s, msgs := ticketStore(t, r, "a", secret)
	first := waitFor(t, msgs, func(m any) bool { _, ok := m.(TicketKeys); return ok }).(TicketKeys)
	// Age the stored set past its hour.
	ctx := context.Background()
	old := &ticketSet{activeFrom: time.Now().Add(-2 * ticketRotation), keys: first.Keys}
	if err := s.rdb.Set(ctx, "test:tickets", s.tickets.seal(old, "test:tickets"), 0).Err(); err != nil {
		t.Fatal(err)
	}
	staged := waitFor(t, msgs, func(m any) bool { _, ok := m.(TicketKeys); return ok }).(TicketKeys)
	if len(staged.Keys) != 2 || !bytes.Equal(staged.Keys[0], first.Keys[0]) || bytes.Equal(staged.Keys[1], first.Keys[0]) {
		t.Fatalf("staged keys: the old one should still encrypt, the new one only decrypt")
	}
	promoted := waitFor(t, msgs, func(m any) bool { _, ok := m.(TicketKeys); return ok }).(TicketKeys)
	if len(promoted.Keys) != 2 || !bytes.Equal(promoted.Keys[0], staged.Keys[1]) || !bytes.Equal(promoted.Keys[1], first.Keys[0]) {
		t.Fatalf("after promoteDelay the new key should encrypt and the old one still decrypt")
	}
}

func TestTicketSeal(t *testing.T) {
	c, err := newTicketCustody(&config.Cluster{SecretFile: secretFile(t, "0123456789abcdef0123456789abcdef")})
	if err != nil {
		t.Fatal(err)
	}
	set := &ticketSet{activeFrom: time.UnixMilli(1700000000123), keys: [][]byte{bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)}}
	blob := c.seal(set, "p:tickets")
	got, err := c.open(blob, "p:tickets")
	if err != nil || !got.activeFrom.Equal(set.activeFrom) || !sameKeys(got.keys, set.keys) {
		t.Fatalf("open(seal) = %+v, %v", got, err)
	}
	if _, err := c.open(blob, "q:tickets"); err == nil {
		t.Error("a blob opened under another key name")
	}
	blob[len(blob)-1] ^= 1
	if _, err := c.open(blob, "p:tickets"); err == nil {
		t.Error("a tampered blob opened")
	}
	if _, err := newTicketCustody(&config.Cluster{SecretFile: secretFile(t, "short")}); err == nil {
		t.Error("a short secret was accepted")
	}
}

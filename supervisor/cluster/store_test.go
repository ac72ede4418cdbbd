package cluster

import (
	"net/netip"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/gatehouse-dev/gatehouse/internal/redistest"
	"github.com/hashicorp/go-hclog"
	"github.com/redis/go-redis/v9"
)

// redisServer is a redis-server on a loopback port (internal/redistest).
type redisServer = redistest.Server

// startRedis starts a redis-server, or skips the test without one.
func startRedis(t *testing.T) *redisServer { return redistest.Start(t) }

// testStore starts a Store named instance on r whose posts arrive on the
// returned channel.
func testStore(t *testing.T, r *redisServer, instance string) (*Store, chan any) {
	t.Helper()
	msgs := make(chan any, 1024)
	s, err := Start(&config.Cluster{Address: r.Addr(), KeyPrefix: "test:", Instance: instance, StoreTimeout: config.DefaultStoreTimeout},
		hclog.NewNullLogger(), func(m any) { msgs <- m })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	waitFor(t, msgs, func(m any) bool { st, ok := m.(State); return ok && st.Up })
	return s, msgs
}

// waitFor returns the first message on msgs that match accepts, failing the
// test after 10 s.
func waitFor(t *testing.T, msgs chan any, match func(any) bool) any {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case m := <-msgs:
			if match(m) {
				return m
			}
		case <-deadline:
			t.Fatal("no matching message within 10s")
		}
	}
}

func rate(t *testing.T, s *Store, msgs chan any, token uint64, client string) RateResult {
	t.Helper()
	return ask(t, s, msgs, RateReq{Token: token, Class: "login", Client: client, Interval: 20 * time.Second, Burst: 3})
}

// ask queues req and returns the store's decision on it.
func ask(t *testing.T, s *Store, msgs chan any, req RateReq) RateResult {
	t.Helper()
	token := req.Token
	if !s.Rate(req) {
		t.Fatal("Rate refused a request while the store is up")
	}
	res := waitFor(t, msgs, func(m any) bool { r, ok := m.(RateResult); return ok && r.Token == token }).(RateResult)
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	return res
}

// One bucket for two instances: a burst of 3 spent across both, then both
// refuse with the time until the next token.
func TestRateShared(t *testing.T) {
	r := startRedis(t)
	a, am := testStore(t, r, "a")
	b, bm := testStore(t, r, "b")
	for i, want := range []bool{true, true, true, false} {
		s, m := a, am
		if i%2 == 1 {
			s, m = b, bm
		}
		if got := rate(t, s, m, uint64(i+1), "192.0.2.1"); got.Allowed != want {
			t.Fatalf("request %d: allowed %v, want %v", i, got.Allowed, want)
		}
	}
	got := rate(t, a, am, 10, "192.0.2.1")
	if got.Allowed || got.RetryAfter < 19*time.Second || got.RetryAfter > 20*time.Second {
		t.Fatalf("over the limit: %+v, want refused with about 20s to wait", got)
	}
	if !rate(t, b, bm, 11, "192.0.2.2").Allowed {
		t.Fatal("another client was refused")
	}
}

// A peek answers as a charge would and charges nothing: three peeks leave
// the whole burst, and once it is spent a peek is refused too.
func TestRatePeek(t *testing.T) {
	r := startRedis(t)
	a, am := testStore(t, r, "a")
	peek := func(token uint64) RateResult {
		return ask(t, a, am, RateReq{Token: token, Class: "login", Client: "192.0.2.1", Interval: 20 * time.Second, Burst: 3, Peek: true})
	}
	for i := range 3 {
		if !peek(uint64(100 + i)).Allowed {
			t.Fatalf("peek %d on a full bucket refused", i)
		}
	}
	for i, want := range []bool{true, true, true, false} {
		if got := rate(t, a, am, uint64(i+1), "192.0.2.1"); got.Allowed != want {
			t.Fatalf("charge %d after the peeks: allowed %v, want %v", i, got.Allowed, want)
		}
	}
	if got := peek(200); got.Allowed || got.RetryAfter < 19*time.Second {
		t.Fatalf("peek on a spent bucket: %+v, want refused with about 20s to wait", got)
	}
}

// A penalty from one instance reaches another at once, and one that
// connects later reads it from the store.
func TestPenaltyShared(t *testing.T) {
	r := startRedis(t)
	a, _ := testStore(t, r, "a")
	_, bm := testStore(t, r, "b")
	client := netip.MustParseAddr("192.0.2.9")
	a.Penalize(client, time.Minute)
	p := waitFor(t, bm, func(m any) bool { _, ok := m.(Penalty); return ok }).(Penalty)
	if p.Client != client || p.From != "a" || p.Remaining <= 50*time.Second || p.Remaining > time.Minute {
		t.Fatalf("b got %+v", p)
	}
	msgs := make(chan any, 1024)
	c, err := Start(&config.Cluster{Address: r.Addr(), KeyPrefix: "test:", Instance: "c2"}, hclog.NewNullLogger(), func(m any) { msgs <- m })
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p = waitFor(t, msgs, func(m any) bool { _, ok := m.(Penalty); return ok }).(Penalty)
	if p.Client != client || p.From != "a" {
		t.Fatalf("an instance connecting later got %+v", p)
	}
}

// The subscription's own connection may drop while the store stays up:
// what was imposed meanwhile, and reached the keys only, is read back once
// the subscription is back.
func TestPenaltyAfterSubscriptionDropped(t *testing.T) {
	r := startRedis(t)
	_, am := testStore(t, r, "a")
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr()})
	defer rdb.Close()
	ctx := t.Context()
	// Imposed by "b" while a's subscription is away: the key, and a
	// message a cannot have heard.
	if err := rdb.Set(ctx, "test:pen:192.0.2.7", "b", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	p := waitFor(t, am, func(m any) bool { p, ok := m.(Penalty); return ok && p.Client.String() == "192.0.2.7" }).(Penalty)
	if p.From != "b" || p.Remaining <= 50*time.Second {
		t.Fatalf("a got %+v", p)
	}
}

// A store that goes away is reported down once and refused locally at
// once; it is reported up again when it is back.
func TestStoreDownAndBack(t *testing.T) {
	r := startRedis(t)
	s, msgs := testStore(t, r, "a")
	r.Stop()
	st := waitFor(t, msgs, func(m any) bool { _, ok := m.(State); return ok }).(State)
	if st.Up || st.Err == "" {
		t.Fatalf("after the store stopped: %+v", st)
	}
	if s.Rate(RateReq{Token: 1, Class: "x", Client: "192.0.2.1", Interval: time.Second, Burst: 1}) {
		t.Fatal("Rate queued a request while the store is down")
	}
	// Backoff retries while it is down post nothing more.
	select {
	case m := <-msgs:
		if st, ok := m.(State); ok {
			t.Fatalf("a second state while down: %+v", st)
		}
	case <-time.After(500 * time.Millisecond):
	}
	r.Start()
	waitFor(t, msgs, func(m any) bool { st, ok := m.(State); return ok && st.Up })
	if !s.Up() {
		t.Fatal("Up() false after the store came back")
	}
}

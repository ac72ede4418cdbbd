package e2e

import (
	"context"
	"fmt"
	"github.com/gatehouse-dev/gatehouse/internal/redistest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/supervisor/view"
	"github.com/redis/go-redis/v9"
)

// Several instances sharing one store (issue 31): two supervisors in this
// process, each with its own workers, and a real redis-server on a
// loopback port.

// redisServer is a redis-server on a loopback port (internal/redistest).
type redisServer = redistest.Server

// startRedis starts a redis-server, or skips the test without one.
func startRedis(t testing.TB) *redisServer { return redistest.Start(t) }

// clusterBlock is the cluster block naming r for instance name; extra goes
// inside it.
func clusterBlock(r *redisServer, name, extra string) string {
	return fmt.Sprintf(`
cluster {
  address  = "%s"
  instance = "%s"
  key_prefix = "e2e:"
  store_timeout = "50ms"
%s}
`, r.Addr(), name, extra)
}

// storeUp waits until h's link to the store is up (or down, want false).
func (h *harness) storeUp(want bool) view.Snapshot {
	h.t.Helper()
	return h.waitFor(fmt.Sprintf("cluster store up=%v", want), 20*time.Second, func(s view.Snapshot) bool {
		return s.Cluster != nil && s.Cluster.Up == want
	})
}

// A client limited on instance A is limited on B: the burst of 5 is spent
// across both, and then both answer 429.
func TestClusterRateLimit(t *testing.T) {
	r := startRedis(t)
	a := start(t, rateConfig(clusterBlock(r, "a", "")))
	b := start(t, rateConfig(clusterBlock(r, "b", "")))
	a.storeUp(true)
	b.storeUp(true)
	ca, cb := newClient(t, "127.0.0.2", a.addr), newClient(t, "127.0.0.2", b.addr)
	expectStatuses(t, ca, "/login", nil, 200, 200, 200)
	expectStatuses(t, cb, "/login", nil, 200, 200, 429)
	expectStatuses(t, ca, "/login", nil, 429)
	// Another client is not charged.
	expectStatuses(t, newClient(t, "127.0.0.3", b.addr), "/login", nil, 200)
	for _, h := range []*harness{a, b} {
		if n := h.snapshot().Counters["rate_store_decisions"]; n < 3 {
			t.Errorf("rate_store_decisions = %d, want every check decided by the store", n)
		}
	}
}

// A client penalized on instance A is refused on B for the rest of its
// penalty.
func TestClusterPenalty(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the strict sandbox is checked when started as root")
	}
	r := startRedis(t)
	a := start(t, attackConfig+clusterBlock(r, "a", ""))
	b := start(t, attackConfig+clusterBlock(r, "b", ""))
	a.expectDeaths(3)
	a.storeUp(true)
	b.storeUp(true)
	for i := 0; i < 3; i++ {
		a.waitFor("both workers ready", 20*time.Second, settled(2))
		attackKills(t, a, "127.0.0.2", i)
		a.deathsReach(uint64(i + 1))
	}
	pa := a.snapshot().Client("127.0.0.2").Penalty
	if pa <= 0 {
		t.Fatal("not penalized on A after 3 deaths")
	}
	s := b.waitFor("the penalty shared with B", 10*time.Second, func(s view.Snapshot) bool { return s.Client("127.0.0.2").Penalty > 0 })
	if pb := s.Client("127.0.0.2").Penalty; pb > pa+time.Second {
		t.Errorf("B refuses for %v, longer than what remains on A (%v)", pb, pa)
	}
	conn := dialFrom(t, "127.0.0.2", b.addr)
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(conn, "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n")
	if n, err := conn.Read(make([]byte, 64)); err == nil {
		t.Errorf("B answered the client penalized on A (%d bytes)", n)
	}
	conn.Close()
	expectStatuses(t, newClient(t, "127.0.0.3", b.addr), "/ok", nil, 200)
	if n := s.Counters["client_penalties_shared"]; n != 1 {
		t.Errorf("client_penalties_shared on B = %d, want 1", n)
	}

	// A store that restarts empty gets the penalties in force again: an
	// instance started after it refuses the client too.
	r.Stop()
	a.storeUp(false)
	r.Start()
	a.storeUp(true)
	c := start(t, attackConfig+clusterBlock(r, "c", ""))
	c.waitFor("the penalty re-shared after the store restarted", 10*time.Second, func(s view.Snapshot) bool { return s.Client("127.0.0.2").Penalty > 0 })
}

// The store killed in the middle of load: no request fails, every instance
// falls back to its own buckets (and says so once), and limits are shared
// again once the store is back.
func TestClusterStoreKilled(t *testing.T) {
	r := startRedis(t)
	cfg := func(name string) string {
		return rateConfig(clusterBlock(r, name, "") + `
rate_limit "api" {
  prefix = "/ok"
  rate   = 1000000
  per    = "1s"
  burst  = 1000000
}
`)
	}
	a, b := start(t, cfg("a")), start(t, cfg("b"))
	a.storeUp(true)
	b.storeUp(true)

	// Load: rate-checked requests from four clients on both instances.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	var served [8]int
	for i := range 8 {
		h := []*harness{a, b}[i%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := newClient(t, fmt.Sprintf("127.0.1.%d", i+1), h.addr)
			for n := 0; n < 1_000_000; n++ {
				select {
				case <-stop:
					return
				default:
				}
				resp, body, err := cl.get("/ok")
				if err != nil || resp.StatusCode != 200 || body != "ok\n" {
					errs <- fmt.Errorf("client %d, request %d: %v %v", i, n, resp, err)
					return
				}
				served[i]++
				if resp.Close {
					cl = newClient(t, fmt.Sprintf("127.0.1.%d", i+1), h.addr)
				}
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	r.Stop()
	a.storeUp(false)
	b.storeUp(false)
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	for i, n := range served {
		if n == 0 {
			t.Errorf("client %d was served nothing", i)
		}
	}
	for _, h := range []*harness{a, b} {
		if n := strings.Count(h.logs.String(), "cluster store unreachable"); n != 1 {
			t.Errorf("the store's loss is logged %d times, want once", n)
		}
	}

	// Local: each instance has its own burst of 5.
	ca, cb := newClient(t, "127.0.0.2", a.addr), newClient(t, "127.0.0.2", b.addr)
	expectStatuses(t, ca, "/login", nil, 200, 200, 200, 200, 200, 429)
	expectStatuses(t, cb, "/login", nil, 200, 200, 200, 200, 200, 429)

	// Back: shared again.
	r.Start()
	a.storeUp(true)
	b.storeUp(true)
	ca, cb = newClient(t, "127.0.0.4", a.addr), newClient(t, "127.0.0.4", b.addr)
	expectStatuses(t, ca, "/login", nil, 200, 200, 200)
	expectStatuses(t, cb, "/login", nil, 200, 200, 429)
	if s := a.snapshot(); s.Counters["rate_store_local"] == 0 {
		t.Errorf("no decision was made locally while the store was down: %v", s.Counters)
	}
}

// A store that stops answering (CLIENT PAUSE) holds no request past
// store_timeout (50 ms here): each is decided from the local bucket.
func TestClusterStoreSlow(t *testing.T) {
	r := startRedis(t)
	h := start(t, rateConfig(clusterBlock(r, "a", "")))
	h.storeUp(true)
	cl := newClient(t, "127.0.0.2", h.addr)
	expectStatuses(t, cl, "/login", nil, 200)
	admin := redis.NewClient(&redis.Options{Addr: r.Addr()})
	defer admin.Close()
	if err := admin.Do(context.Background(), "CLIENT", "PAUSE", "3000", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		t0 := time.Now()
		expectStatuses(t, cl, "/login", nil, 200)
		if d := time.Since(t0); d > time.Second {
			t.Errorf("request %d took %v while the store was paused", i, d)
		}
	}
	s := h.snapshot()
	if s.Counters["rate_store_timeouts"]+s.Counters["rate_store_local"] < 3 {
		t.Errorf("the paused store's checks were not decided locally: %v", s.Counters)
	}
}

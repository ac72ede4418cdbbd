package limits

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/config"
)

// loginClass is 20 a minute (a token every 3 s), burst 5.
var loginClass = &config.RateLimit{Name: "login", Prefix: "/login", Rate: 20, Per: time.Minute, Burst: 5}

func testAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

func TestTokenBucketRefill(t *testing.T) {
	l := NewLimiter(100)
	c := testAddr("192.0.2.1")
	t0 := time.Unix(1_700_000_000, 0)
	type step struct {
		at   time.Duration // since t0
		ok   bool
		wait time.Duration // when refused
	}
	steps := []step{
		// The burst, all at once.
		{0, true, 0}, {0, true, 0}, {0, true, 0}, {0, true, 0}, {0, true, 0},
		// Empty: the next token is 3 s away.
		{0, false, 3 * time.Second},
		{time.Second, false, 2 * time.Second},
		// A refused request costs nothing.
		{2 * time.Second, false, time.Second},
		// One token after 3 s, spent at once.
		{3 * time.Second, true, 0},
		{3 * time.Second, false, 3 * time.Second},
		// Refill is continuous: 1.5 tokens after 4.5 s more.
		{7500 * time.Millisecond, true, 0},
		{7500 * time.Millisecond, false, 1500 * time.Millisecond},
		// A long quiet time fills the bucket to burst, never beyond.
		{time.Hour, true, 0}, {time.Hour, true, 0}, {time.Hour, true, 0}, {time.Hour, true, 0}, {time.Hour, true, 0},
		{time.Hour, false, 3 * time.Second},
	}
	for i, s := range steps {
		ok, wait := l.Take(c, loginClass, t0.Add(s.at))
		if ok != s.ok || (!ok && (wait-s.wait).Abs() > time.Millisecond) {
			t.Errorf("step %d at +%v: take = %v, %v; want %v, %v", i, s.at, ok, wait, s.ok, s.wait)
		}
	}
	if l.Len() != 1 {
		t.Errorf("len = %d, want 1", l.Len())
	}
}

// Peek answers as Take would and charges nothing, nor keeps a bucket for
// a client that has none.
func TestLimiterPeek(t *testing.T) {
	l := NewLimiter(100)
	c := testAddr("192.0.2.1")
	t0 := time.Unix(1_700_000_000, 0)
	if ok, _ := l.Peek(c, loginClass, t0); !ok || l.Len() != 0 {
		t.Fatalf("peek at a new client: %v, %d buckets; want allowed, none kept", ok, l.Len())
	}
	for i := range loginClass.Burst {
		if ok, _ := l.Peek(c, loginClass, t0); !ok {
			t.Fatalf("peek before take %d refused", i)
		}
		if ok, _ := l.Take(c, loginClass, t0); !ok {
			t.Fatalf("take %d refused", i)
		}
	}
	ok, wait := l.Peek(c, loginClass, t0.Add(time.Second))
	if ok || (wait-2*time.Second).Abs() > time.Millisecond {
		t.Fatalf("peek at an empty bucket: %v, %v; want refused, 2s", ok, wait)
	}
	if ok, _ := l.Peek(c, loginClass, t0.Add(3*time.Second)); !ok {
		t.Fatal("peek after a refill refused")
	}
	if ok, _ := l.Take(c, loginClass, t0.Add(3*time.Second)); !ok {
		t.Fatal("the peeks spent the refilled token")
	}
}

func TestBucketsPerClientAndClass(t *testing.T) {
	l := NewLimiter(100)
	now := time.Unix(1_700_000_000, 0)
	other := &config.RateLimit{Name: "default", Rate: 1, Per: time.Hour, Burst: 1}
	for i := 0; i < loginClass.Burst; i++ {
		l.Take(testAddr("192.0.2.1"), loginClass, now)
	}
	if ok, _ := l.Take(testAddr("192.0.2.1"), loginClass, now); ok {
		t.Fatal("over the burst: allowed")
	}
	// Another client, and the same client in another class, have their
	// own buckets.
	if ok, _ := l.Take(testAddr("192.0.2.2"), loginClass, now); !ok {
		t.Error("another client: refused")
	}
	if ok, _ := l.Take(testAddr("192.0.2.1"), other, now); !ok {
		t.Error("the same client in another class: refused")
	}
	if l.Len() != 3 {
		t.Errorf("len = %d, want 3", l.Len())
	}
}

// checkList verifies the LRU list against the map, and returns its keys'
// clients from most to least recently used.
func checkList(t *testing.T, l *Limiter) []string {
	t.Helper()
	var order []string
	n := 0
	for el := l.lru.Front(); el != nil; el = el.Next() {
		b := el.Value.(*bucket)
		if l.buckets[b.key] != el {
			t.Fatalf("bucket %v on the list is not the map's", b.key)
		}
		order = append(order, b.key.client.String())
		if n++; n > len(l.buckets) {
			t.Fatalf("the list is longer than the map (%d)", len(l.buckets))
		}
	}
	if n != len(l.buckets) {
		t.Fatalf("the list holds %d buckets, the map %d", n, len(l.buckets))
	}
	return order
}

func TestLimiterEvictsLeastRecentlyUsed(t *testing.T) {
	l := NewLimiter(3)
	now := time.Unix(1_700_000_000, 0)
	take := func(c string) {
		t.Helper()
		l.Take(testAddr(c), loginClass, now)
		now = now.Add(time.Millisecond)
	}
	take("192.0.2.1")
	take("192.0.2.2")
	take("192.0.2.3")
	if got, want := fmt.Sprint(checkList(t, l)), "[192.0.2.3 192.0.2.2 192.0.2.1]"; got != want {
		t.Fatalf("order %s, want %s", got, want)
	}
	// Using .1 makes .2 the least recently used: it goes first.
	take("192.0.2.1")
	take("192.0.2.4")
	if got, want := fmt.Sprint(checkList(t, l)), "[192.0.2.4 192.0.2.1 192.0.2.3]"; got != want {
		t.Fatalf("order %s, want %s", got, want)
	}
	take("192.0.2.5")
	if got, want := fmt.Sprint(checkList(t, l)), "[192.0.2.5 192.0.2.4 192.0.2.1]"; got != want {
		t.Fatalf("order %s, want %s", got, want)
	}
	// A refused request is a use too.
	for i := 0; i < 10; i++ {
		take("192.0.2.1")
	}
	take("192.0.2.6")
	if got, want := fmt.Sprint(checkList(t, l)), "[192.0.2.6 192.0.2.1 192.0.2.5]"; got != want {
		t.Fatalf("order %s, want %s", got, want)
	}
	// An evicted client comes back with a full bucket.
	for i := 0; i < loginClass.Burst; i++ {
		if ok, _ := l.Take(testAddr("192.0.2.2"), loginClass, now); !ok {
			t.Fatalf("evicted client, request %d: refused", i)
		}
	}
	// A one-entry table.
	one := NewLimiter(1)
	one.Take(testAddr("192.0.2.1"), loginClass, now)
	one.Take(testAddr("192.0.2.2"), loginClass, now)
	if got, want := fmt.Sprint(checkList(t, one)), "[192.0.2.2]"; got != want {
		t.Errorf("one entry: order %s, want %s", got, want)
	}
}

// Many distinct clients keep the table at its bound, with the most recent
// ones in it.
func TestLimiterBounded(t *testing.T) {
	const max = 1000
	l := NewLimiter(max)
	now := time.Unix(1_700_000_000, 0)
	for i := 0; i < 200*max; i++ {
		a := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		l.Take(a, loginClass, now)
		if l.Len() > max {
			t.Fatalf("after %d clients: %d buckets, over %d", i+1, l.Len(), max)
		}
	}
	order := checkList(t, l)
	if len(order) != max {
		t.Fatalf("%d buckets, want %d", len(order), max)
	}
	last := 200*max - 1
	if want := netip.AddrFrom4([4]byte{10, byte(last >> 16), byte(last >> 8), byte(last)}).String(); order[0] != want {
		t.Errorf("most recent %s, want %s", order[0], want)
	}
	first := 200*max - max
	if want := netip.AddrFrom4([4]byte{10, byte(first >> 16), byte(first >> 8), byte(first)}).String(); order[max-1] != want {
		t.Errorf("least recent %s, want %s", order[max-1], want)
	}
}

// take is O(1): its cost does not grow with the table, and a full table
// allocates only the new bucket.
func TestLimiterTakeAllocs(t *testing.T) {
	l := NewLimiter(1000)
	now := time.Unix(1_700_000_000, 0)
	i := 0
	next := func() netip.Addr {
		i++
		return netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
	}
	for l.Len() < 1000 {
		l.Take(next(), loginClass, now)
	}
	hit := testAddr("10.0.0.1")
	l.Take(hit, loginClass, now)
	if n := testing.AllocsPerRun(1000, func() { l.Take(hit, loginClass, now) }); n != 0 {
		t.Errorf("take of an existing bucket: %v allocations, want 0", n)
	}
	if n := testing.AllocsPerRun(1000, func() { l.Take(next(), loginClass, now) }); n > 2 {
		t.Errorf("take of a new bucket in a full table: %v allocations, want at most 2 (bucket, map growth)", n)
	}
}

func BenchmarkLimiterTakeFull(b *testing.B) {
	l := NewLimiter(100000)
	now := time.Unix(1_700_000_000, 0)
	for i := 0; b.Loop(); i++ {
		l.Take(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), loginClass, now)
	}
}

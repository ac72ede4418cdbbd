package upstream

import (
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/hashicorp/go-hclog"
)

// testBroker is a broker of one upstream of n addresses, shared by three
// workers.
func testBroker(n int) (*Broker, *upstreamState) {
	u := config.Upstream{Name: "app", MaxConnections: 4, MaxFails: 2, FailTimeout: 10 * time.Second}
	for i := 0; i < n; i++ {
		u.Addresses = append(u.Addresses, config.Address{AddrPort: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(9000+i))})
	}
	b := New(hclog.NewNullLogger(), func(any) {})
	b.Configure([]config.Upstream{u}, nil, nil, 3)
	return b, b.upstreams["app"]
}

func TestUpstreamRotationAndPassiveHealth(t *testing.T) {
	b, u := testBroker(3)
	now := time.Unix(1000, 0)
	picks := func(n int) []int {
		var out []int
		for i := 0; i < n; i++ {
			k, ok := u.pick(now, nil)
			if !ok {
				k = -1
			}
			out = append(out, k)
		}
		return out
	}
	if got := picks(4); !slices.Equal(got, []int{0, 1, 2, 0}) {
		t.Fatalf("round robin: %v", got)
	}
	// Tried addresses are skipped for the same request.
	if k, _ := u.pick(now, []int{1, 2}); k != 0 {
		t.Errorf("with 1 and 2 tried: picked %d, want 0", k)
	}
	if _, ok := u.pick(now, []int{0, 1, 2}); ok {
		t.Errorf("with every address tried: picked one")
	}
	// max_fails = 2: one failure keeps it, the second takes it out.
	refused := errors.New("connection refused")
	b.addrResult(u, u.addrs[1], refused, now)
	if got := picks(3); !slices.Equal(got, []int{1, 2, 0}) {
		t.Errorf("after one failure: %v, want 1 still in rotation", got)
	}
	b.addrResult(u, u.addrs[1], refused, now)
	if got := picks(4); !slices.Equal(got, []int{2, 0, 2, 0}) {
		t.Errorf("after max_fails: %v, want 1 out", got)
	}
	// Past fail_timeout one dial probes it; no second until it answers.
	now = now.Add(10 * time.Second)
	if got := picks(4); !slices.Equal(got, []int{1, 2, 0, 2}) {
		t.Errorf("past fail_timeout: %v, want one probe of 1", got)
	}
	b.addrResult(u, u.addrs[1], refused, now)
	if got := picks(2); !slices.Equal(got, []int{0, 2}) {
		t.Errorf("after a failed probe: %v, want 1 out again", got)
	}
	now = now.Add(10 * time.Second)
	if got := picks(3); !slices.Equal(got, []int{0, 1, 2}) {
		t.Fatalf("second probe: %v, want 1 probed in its turn", got)
	}
	b.addrResult(u, u.addrs[1], nil, now)
	if got := picks(3); !slices.Equal(got, []int{0, 1, 2}) {
		t.Errorf("after a successful probe: %v, want 1 back", got)
	}
	// A failing health check takes it out regardless; a passing one
	// brings it back and ends a passive timeout.
	b.HealthChecked(HealthResult{upstream: "app", addr: u.addrs[0].addr, err: errors.New("503")}, now)
	if got := picks(3); !slices.Equal(got, []int{1, 2, 1}) {
		t.Errorf("with 0 failing its check: %v", got)
	}
	b.HealthChecked(HealthResult{upstream: "app", addr: u.addrs[0].addr}, now)
	if got := picks(3); !slices.Equal(got, []int{2, 0, 1}) {
		t.Errorf("with 0 passing again: %v", got)
	}
	if info := b.Info(now); len(info) != 1 || info[0].Share != 2 || info[0].Addresses[1].Failures != 3 {
		t.Errorf("Info: %+v, want share ⌈4/3⌉ = 2 and address 1's 3 failures", info)
	}
}

// As in nginx, an upstream with one address is never taken out; past
// max_fails failed dials in a row it shows "failing", and "up" again after
// a dial that works.
func TestUpstreamSingleAddressStays(t *testing.T) {
	b, u := testBroker(1)
	now := time.Unix(1000, 0)
	state := func() string { return b.Info(now)[0].Addresses[0].State }
	b.addrResult(u, u.addrs[0], errors.New("refused"), now)
	if s := state(); s != "up" {
		t.Errorf("after 1 failure of max_fails 2: %s, want up", s)
	}
	for i := 0; i < 4; i++ {
		b.addrResult(u, u.addrs[0], errors.New("refused"), now)
	}
	if k, ok := u.pick(now, nil); !ok || k != 0 {
		t.Errorf("single address after failures: %d %v, want it picked", k, ok)
	}
	if s := state(); s != "failing" {
		t.Errorf("after 5 failures: %s, want failing", s)
	}
	b.addrResult(u, u.addrs[0], nil, now)
	if s := state(); s != "up" {
		t.Errorf("after a dial that worked: %s, want up", s)
	}
}

// A reload keeps the health of the addresses that stay.
func TestUpstreamReloadKeepsAddressState(t *testing.T) {
	b, u := testBroker(2)
	now := time.Unix(1000, 0)
	b.addrResult(u, u.addrs[1], errors.New("refused"), now)
	b.addrResult(u, u.addrs[1], errors.New("refused"), now)
	up := u.cfg
	up.Addresses = append([]config.Address{{AddrPort: netip.MustParseAddrPort("127.0.0.1:8000")}}, up.Addresses...)
	b.Configure([]config.Upstream{up}, nil, nil, 3)
	u = b.upstreams["app"]
	if len(u.addrs) != 3 || u.addrs[2].addr.ap != up.Addresses[2].AddrPort || u.addrs[2].downUntil.IsZero() || !u.addrs[0].downUntil.IsZero() {
		t.Errorf("after the reload: %+v %+v %+v, want the failed address still out", *u.addrs[0], *u.addrs[1], *u.addrs[2])
	}
}

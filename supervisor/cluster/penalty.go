package cluster

import (
	"context"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Penalties are shared as one key per penalized client key, which expires
// with the penalty, and a message on a channel every instance subscribes
// to, so the others refuse the client at once; an instance that connects
// (at start, or after the store was down) reads the keys to learn the
// penalties it missed.

// Penalty is a penalty another instance imposed, posted to the loop.
type Penalty struct {
	Client netip.Addr
	// Remaining is how long it still runs, from when it was read.
	Remaining time.Duration
	// From is the instance that imposed it.
	From string
}

type penaltyPub struct {
	client    netip.Addr
	remaining time.Duration
}

// Penalize shares that client is refused for d from now. It never waits; a
// penalty imposed while the store is down stays local.
func (s *Store) Penalize(client netip.Addr, d time.Duration) {
	if !s.up.Load() {
		return
	}
	select {
	case s.pens <- penaltyPub{client, d}:
	default:
	}
}

func (s *Store) penaltyChannel() string { return s.key("penalties") }

func (s *Store) penaltyPublisher() {
	defer s.wg.Done()
	for {
		var p penaltyPub
		select {
		case <-s.ctx.Done():
			return
		case p = <-s.pens:
		}
		ctx, cancel := context.WithTimeout(s.ctx, callTimeout)
		pipe := s.rdb.TxPipeline()
		pipe.Set(ctx, s.key("pen:"+p.client.String()), s.cfg.Instance, p.remaining)
		pipe.Publish(ctx, s.penaltyChannel(), p.client.String()+" "+strconv.FormatInt(p.remaining.Milliseconds(), 10)+" "+s.cfg.Instance)
		_, err := pipe.Exec(ctx)
		cancel()
		s.failed(err)
		if err != nil {
			s.log.Debug("sharing a penalty failed", "error", err)
		}
	}
}

// subscriber passes other instances' penalties to the loop. The client
// library keeps the subscription across reconnects of its own connection,
// which may drop while the store stays up for every other call: what was
// published before the subscription took, at start or after a drop, is
// read back from the keys (loadPenalties) each time it does.
func (s *Store) subscriber() {
	defer s.wg.Done()
	ps := s.rdb.Subscribe(s.ctx, s.penaltyChannel())
	defer ps.Close()
	ch := ps.ChannelWithSubscriptions()
	for {
		var m any
		select {
		case <-s.ctx.Done():
			return
		case v, ok := <-ch:
			if !ok {
				return
			}
			m = v
		}
		switch m := m.(type) {
		case *redis.Subscription:
			if m.Kind != "subscribe" {
				continue
			}
			ctx, cancel := context.WithTimeout(s.ctx, callTimeout)
			if err := s.loadPenalties(ctx); err != nil {
				s.log.Debug("reading penalties once subscribed failed", "error", err)
			}
			cancel()
		case *redis.Message:
			if p, ok := s.parsePenalty(m.Payload); ok {
				s.post(p)
			}
		}
	}
}

// parsePenalty reads a published "client milliseconds instance"; a
// malformed one, or this instance's own, is dropped.
func (s *Store) parsePenalty(payload string) (Penalty, bool) {
	f := strings.Fields(payload)
	if len(f) != 3 || f[2] == s.cfg.Instance {
		return Penalty{}, false
	}
	a, err1 := netip.ParseAddr(f[0])
	ms, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil || ms <= 0 {
		return Penalty{}, false
	}
	return Penalty{Client: a, Remaining: time.Duration(ms) * time.Millisecond, From: f[2]}, true
}

// loadPenalties posts every penalty in the store that another instance
// imposed, with what remains of it.
func (s *Store) loadPenalties(ctx context.Context) error {
	prefix := s.key("pen:")
	iter := s.rdb.Scan(ctx, 0, prefix+"*", 256).Iterator()
	for n := 0; iter.Next(ctx) && n < maxPenaltiesRead; n++ {
		k := iter.Val()
		a, err := netip.ParseAddr(strings.TrimPrefix(k, prefix))
		if err != nil {
			continue
		}
		pipe := s.rdb.Pipeline()
		from := pipe.Get(ctx, k)
		ttl := pipe.PTTL(ctx, k)
		if _, err := pipe.Exec(ctx); err != nil {
			continue // expired between the scan and the read
		}
		if from.Val() == s.cfg.Instance || ttl.Val() <= 0 {
			continue
		}
		s.post(Penalty{Client: a, Remaining: ttl.Val(), From: from.Val()})
	}
	return iter.Err()
}

// maxPenaltiesRead bounds the penalties read at a (re)connect, as the
// penalty box bounds the keys it holds.
const maxPenaltiesRead = 100000

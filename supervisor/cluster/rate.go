package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// rateScript is the shared rate limiter: GCRA, the token bucket kept as one
// number per client and class, the theoretical arrival time (TAT) of the
// next request in microseconds of the store's clock. Run atomically by the
// store, it charges one request, so two instances charging the same client
// at once are counted as two. The store's clock (TIME) is the only one
// read, so instances whose clocks differ still agree.
//
// ARGV[1] is the emission interval (per/rate) in microseconds, ARGV[2]
// the burst and ARGV[3] 1 for a peek, which answers and charges nothing. A
// client may run ahead of its rate by burst-1 intervals; a request that
// would go further is refused, the TAT unchanged, with the microseconds
// until it would be allowed. The key expires once the bucket is full
// again, so idle clients cost the store nothing.
var rateScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local tolerance = interval * (tonumber(ARGV[2]) - 1)
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
if tat - now > tolerance then
  return {0, tat - now - tolerance}
end
if ARGV[3] == '1' then
  return {1, 0}
end
tat = tat + interval
redis.call('SET', KEYS[1], string.format('%d', tat), 'PX', math.ceil((tat - now) / 1000) + 1)
return {1, 0}
`)

// RateReq asks the store to charge one request of Client in Class.
type RateReq struct {
	// Token is the loop's, passed back in the RateResult.
	Token  uint64
	Class  string
	Client string
	// Interval is the rate limit's per/rate, Burst its bucket size.
	Interval time.Duration
	Burst    int
	// Peek asks whether the request would be allowed, charging nothing.
	Peek bool
}

// RateResult is the store's decision on a RateReq, or why there is none.
type RateResult struct {
	Token      uint64
	Allowed    bool
	RetryAfter time.Duration
	Err        error
}

// Rate queues r for the store and reports whether it did: false when the
// store is down or the queue is full, and the caller decides locally. It
// never waits.
func (s *Store) Rate(r RateReq) bool {
	if !s.up.Load() {
		return false
	}
	select {
	case s.rates <- r:
		return true
	default:
		return false
	}
}

// rateWorker runs queued requests against the store, each batch of those
// waiting in one pipeline (one round trip).
func (s *Store) rateWorker() {
	defer s.wg.Done()
	batch := make([]RateReq, 0, rateBatch)
	cmds := make([]*redis.Cmd, 0, rateBatch)
	for {
		select {
		case <-s.ctx.Done():
			return
		case r := <-s.rates:
			batch = append(batch[:0], r)
		}
	more:
		for len(batch) < rateBatch {
			select {
			case r := <-s.rates:
				batch = append(batch, r)
			default:
				break more
			}
		}
		cmds = s.runRates(batch, cmds[:0])
	}
}

// runRates charges batch in one pipeline and posts every result.
func (s *Store) runRates(batch []RateReq, cmds []*redis.Cmd) []*redis.Cmd {
	ctx, cancel := context.WithTimeout(s.ctx, callTimeout)
	defer cancel()
	pipe := s.rdb.Pipeline()
	for _, r := range batch {
		us := max(1, r.Interval.Microseconds())
		peek := 0
		if r.Peek {
			peek = 1
		}
		cmds = append(cmds, rateScript.EvalSha(ctx, pipe, []string{s.key("rl:" + r.Class + ":" + r.Client)}, us, r.Burst, peek))
	}
	_, err := pipe.Exec(ctx)
	if redis.HasErrorPrefix(err, "NOSCRIPT") {
		// The store restarted or was flushed between two health checks:
		// this batch is decided locally, the next finds the script.
		rateScript.Load(ctx, s.rdb)
	}
	s.failed(err)
	for i, r := range batch {
		res := RateResult{Token: r.Token}
		res.Allowed, res.RetryAfter, res.Err = rateReply(cmds[i])
		s.post(res)
	}
	return cmds
}

// rateReply decodes the script's {allowed, retry_us}.
func rateReply(cmd *redis.Cmd) (bool, time.Duration, error) {
	v, err := cmd.Int64Slice()
	if err != nil {
		return false, 0, err
	}
	if len(v) != 2 {
		return false, 0, fmt.Errorf("rate script answered %v", v)
	}
	return v[0] == 1, time.Duration(v[1]) * time.Microsecond, nil
}

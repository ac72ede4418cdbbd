package logrelay

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Worker output (docs/DESIGN.md §6.4). A worker is untrusted, so each line it
// prints is data the supervisor re-emits, never a log line it vouches for:
//
//   - Attributed: the line is logged by a logger named "worker" whose worker
//     and pid fields the supervisor set. A worker's own fields come after
//     them; one that would shadow them (or hclog's "@" keys, or an invalid
//     key) is renamed "worker.<key>". A relayed line has no hclog message of
//     its own: the worker's message is the msg field (output for a line that
//     is not hclog JSON), so only the supervisor writes the message position.
//   - Escaped: a string holding anything but printable ASCII is Go-quoted,
//     so no CR, ESC or newline reaches a terminal or splits a line. Numbers
//     stay numbers (JSON decoding would make 104857600 print as 1.048576e+08).
//   - In order: fields come in the order the worker wrote them.
//   - Rate-limited: each worker process has a token bucket; a line over it is
//     dropped and counted, and the count is reported at most once per
//     relayNoticeEvery.
const (
	relayRate        = 100  // lines per second, per worker process
	relayBurst       = 1000 // lines
	relayNoticeEvery = 10 * time.Second
	// relayMaxLine bounds a line; a longer one is dropped (and counted).
	relayMaxLine = 64 << 10
	relayMaxKey  = 64
)

// WorkerOutput re-emits one worker process's output (its standard output
// and error). It is owned by the goroutine
// that reads the worker's pipe.
type WorkerOutput struct {
	log hclog.Logger // the worker's lines
	// who are the attribution fields every line starts with.
	who []any
	// dropped counts lines dropped since the last notice; total is the
	// supervisor's counter over every worker (a metric).
	dropped uint64
	total   *atomic.Uint64
	noticed time.Time
	lines   lineBucket
	now     func() time.Time
}

// NewWorkerOutput returns the relay of worker slot's process pid, logging
// through log and counting dropped lines in total.
func NewWorkerOutput(log hclog.Logger, slot, pid int, total *atomic.Uint64) *WorkerOutput {
	l := log.Named("worker")
	return &WorkerOutput{
		log:   l,
		who:   []any{"worker", slot, "pid", pid},
		total: total,
		lines: lineBucket{rate: relayRate, burst: relayBurst, tokens: relayBurst},
		now:   time.Now,
	}
}

// Run relays lines from in until it ends; a line over relayMaxLine is dropped,
// never allowed to block the worker.
func (r *WorkerOutput) Run(in io.Reader) {
	br := bufio.NewReaderSize(in, 4096)
	var line []byte
	long := false
	for {
		chunk, err := br.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			if !long {
				line = append(line, chunk...)
				if len(line) > relayMaxLine {
					long, line = true, line[:0]
				}
			}
			continue
		case err != nil && len(chunk) == 0 && len(line) == 0:
			r.flush(r.now())
			return
		}
		if long {
			long = false
			r.drop(r.now())
		} else {
			line = append(line, bytes.TrimSuffix(chunk, []byte("\n"))...)
			if len(line) > relayMaxLine {
				r.drop(r.now())
			} else {
				r.line(line, r.now())
			}
		}
		line = line[:0]
		if err != nil {
			r.flush(r.now())
			return
		}
	}
}

// line relays one line, or drops it over the rate limit.
func (r *WorkerOutput) line(b []byte, now time.Time) {
	level, module, msg, fields, ok := parseWorkerJSON(b)
	args := append(r.who[:len(r.who):len(r.who)], "msg", relayString(msg))
	switch {
	case !ok:
		level, args = hclog.Info, append(args[:len(r.who)], "output", relayString(string(b)))
		if bytes.HasPrefix(b, []byte("panic:")) || bytes.HasPrefix(b, []byte("fatal error:")) {
			level = hclog.Error
		}
	case module != "worker" && module != "":
		args = append(args, "module", relayString(module))
	}
	if !r.lines.take(now) {
		r.drop(now)
		return
	}
	r.log.Log(level, "", append(args, fields...)...)
	r.notice(now)
}

// drop counts a line that was not relayed.
func (r *WorkerOutput) drop(now time.Time) {
	r.dropped++
	r.total.Add(1)
	r.notice(now)
}

// notice reports dropped lines, at most once per relayNoticeEvery: a
// flooding worker costs the log one line per interval.
func (r *WorkerOutput) notice(now time.Time) {
	if r.dropped == 0 || now.Sub(r.noticed) < relayNoticeEvery {
		return
	}
	r.flush(now)
}

func (r *WorkerOutput) flush(now time.Time) {
	if r.dropped == 0 {
		return
	}
	r.log.Warn("worker output over the relay's limit, lines dropped", append(r.who[:len(r.who):len(r.who)],
		"dropped", r.dropped, "limit_lines_per_second", relayRate)...)
	r.dropped = 0
	r.noticed = now
}

// lineBucket is a token bucket of lines.
type lineBucket struct {
	rate, burst, tokens float64
	last                time.Time
}

func (b *lineBucket) take(now time.Time) bool {
	if !b.last.IsZero() {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	}
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// parseWorkerJSON decodes one hclog JSON line, keeping its fields in order.
// It reports false for anything else.
func parseWorkerJSON(b []byte) (level hclog.Level, module, msg string, args []any, ok bool) {
	if len(b) == 0 || b[0] != '{' {
		return 0, "", "", nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return 0, "", "", nil, false
	}
	level = hclog.Info
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return 0, "", "", nil, false
		}
		key, _ := t.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return 0, "", "", nil, false
		}
		switch key {
		case "@level":
			var s string
			json.Unmarshal(raw, &s)
			if l := hclog.LevelFromString(s); l != hclog.NoLevel {
				level = l
			}
		case "@message":
			json.Unmarshal(raw, &msg)
		case "@module":
			json.Unmarshal(raw, &module)
		case "@timestamp", "@caller":
			// The supervisor's own line has its own.
		default:
			args = append(args, relayKey(key), relayValue(raw))
		}
	}
	if t, err := dec.Token(); err != nil || t != json.Delim('}') {
		return 0, "", "", nil, false
	}
	if _, err := dec.Token(); err != io.EOF {
		return 0, "", "", nil, false // trailing bytes: not one JSON object
	}
	return level, module, msg, args, true
}

// relayKey returns key if a worker may use it as it is, else "worker." and
// key with every other byte replaced by '_'. A worker may not shadow the
// fields the supervisor sets (worker, pid, msg, output, module) nor use
// hclog's "@" keys.
func relayKey(key string) string {
	switch key {
	case "worker", "pid", "msg", "output", "module":
	default:
		if key != "" && len(key) <= relayMaxKey && validKey(key) {
			return key
		}
	}
	b := []byte("worker.")
	for i := 0; i < len(key) && i < relayMaxKey; i++ {
		c := key[i]
		if !keyByte(c) {
			c = '_'
		}
		b = append(b, c)
	}
	return string(b)
}

func validKey(key string) bool {
	for i := 0; i < len(key); i++ {
		if !keyByte(key[i]) {
			return false
		}
	}
	return true
}

func keyByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-'
}

// relayValue converts a JSON value for the log: numbers as integers where
// they are, strings escaped, objects and arrays as their escaped JSON text.
func relayValue(raw json.RawMessage) any {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return ""
	}
	switch raw[0] {
	case '"':
		var s string
		json.Unmarshal(raw, &s)
		return relayString(s)
	case 't':
		return true
	case 'f':
		return false
	case 'n':
		return nil
	case '{', '[':
		var buf bytes.Buffer
		if json.Compact(&buf, raw) == nil {
			return relayString(buf.String())
		}
		return relayString(string(raw))
	}
	s := string(raw)
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return i
	}
	if u, err := strconv.ParseUint(s, 10, 64); err == nil {
		return u
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		return f
	}
	return relayString(s)
}

// relayString returns s to be logged: as it is when it is printable ASCII
// without quotes or backslashes (hclog quotes it if it has spaces), else
// Go-quoted, which escapes every control byte and keeps it on one line.
func relayString(s string) any {
	if PlainText(s) {
		return s
	}
	return hclog.Quote(s)
}

// PlainText reports whether s is printable ASCII without quotes or
// backslashes: text that reads the same whether or not it is quoted.
func PlainText(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

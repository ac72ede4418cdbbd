package worker

import (
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/gatehouse-dev/gatehouse/worker/httphead"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// pipeBuf is the largest write a pipe or a stream socket (standard error,
// journald) takes whole: the writer cuts its buffer into pieces of whole
// lines no longer than this, so that lines from several processes sharing
// the descriptor never interleave. Appends to a regular file are whole at
// any size.
const pipeBuf = 4096

// accessFormat is the access log's line format.
type accessFormat uint8

const (
	formatJSON     accessFormat = iota // one JSON object a line, fields in a fixed order
	formatCombined                     // the NCSA combined format, as nginx and Apache write it
)

// accessEntry is what one access log line says about a response.
type accessEntry struct {
	end      time.Time
	dur      time.Duration
	method   string
	path     string // without its query, which may hold tokens
	proto    string
	status   int
	bytes    int64
	client   string // the client key, masked as configured
	referer  string // without its query
	agent    string
	workerID uint32
}

// entryFor fills an entry's request fields from a head, or "-" when the head
// never parsed.
func entryFor(h *httphead.Head) accessEntry {
	e := accessEntry{method: "-", path: "-", proto: "-"}
	if h == nil {
		return e
	}
	e.method, e.proto = h.Method, h.Proto
	if h.URL != nil {
		e.path = h.URL.Path
	}
	e.referer = stripQuery(h.Header.Get("Referer"))
	e.agent = h.Header.Get("User-Agent")
	return e
}

// stripQuery drops a URL's query and fragment.
func stripQuery(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] == '?' || s[i] == '#' {
			return s[:i]
		}
	}
	return s
}

// accessLog buffers formatted lines and writes them to the descriptor the
// supervisor opened, when the buffer holds limit bytes or its oldest line is
// flushAfter old, whichever comes first (nginx's access_log buffer= flush=).
// The descriptor is replaced when the supervisor reopens the log; what was
// buffered goes to the old one first, so a rotation loses no line.
type accessLog struct {
	format     accessFormat // immutable
	limit      int          // immutable
	flushAfter time.Duration
	log        hclog.Logger
	hasOut     atomic.Bool // a descriptor arrived

	mu    sync.Mutex
	buf   []byte      // +checklocks:mu
	armed bool        // the flush timer runs; +checklocks:mu
	timer *time.Timer // +checklocks:mu

	// wmu serialises writes and descriptor switches, so that lines reach
	// the descriptor in the order they were buffered. It is taken before mu.
	wmu     sync.Mutex
	out     *os.File  // +checklocks:wmu
	chunk   int       // write at most this much at once, 0: no bound; +checklocks:wmu
	spare   []byte    // +checklocks:wmu
	dropped uint64    // lines lost to write errors; +checklocks:wmu
	warned  time.Time // when a write error was last logged; +checklocks:wmu
}

func newAccessLog(format string, limit int, flushAfter time.Duration, log hclog.Logger) *accessLog {
	a := &accessLog{limit: limit, flushAfter: flushAfter, log: log}
	if format == "combined" {
		a.format = formatCombined
	}
	a.buf = make([]byte, 0, max(limit, pipeBuf)+pipeBuf)
	a.spare = make([]byte, 0, cap(a.buf))
	a.timer = time.AfterFunc(time.Hour, a.flush)
	a.timer.Stop()
	return a
}

// ready reports whether the log has a descriptor to write to. It never
// waits for a write.
func (a *accessLog) ready() bool { return a.hasOut.Load() }

// add formats e into the buffer and writes the buffer out when it is full.
func (a *accessLog) add(e *accessEntry) {
	a.mu.Lock()
	switch a.format {
	case formatCombined:
		a.buf = appendCombined(a.buf, e)
	default:
		a.buf = appendJSON(a.buf, e)
	}
	full := len(a.buf) >= a.limit
	if !full && !a.armed {
		a.armed = true
		a.timer.Reset(a.flushAfter)
	}
	a.mu.Unlock()
	if full {
		a.flush()
	}
}

// flush writes out what is buffered.
func (a *accessLog) flush() {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	a.flushLocked()
}

// +checklocks:a.wmu
func (a *accessLog) flushLocked() {
	a.mu.Lock()
	b := a.buf
	a.buf = a.spare[:0]
	a.armed = false
	a.timer.Stop()
	a.mu.Unlock()
	a.write(b)
	a.spare = b[:0]
}

// setOut makes f the descriptor lines go to, after writing what is buffered
// to the previous one, which is then closed.
func (a *accessLog) setOut(f *os.File) {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	if a.out != nil {
		a.flushLocked()
		a.out.Close()
	}
	a.out = f
	a.hasOut.Store(true)
	a.chunk = pipeBuf
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
		a.chunk = 0
	}
}

// write writes b, whole lines at a time, in pieces of at most a.chunk bytes.
// +checklocks:a.wmu
func (a *accessLog) write(b []byte) {
	for len(b) > 0 {
		n := len(b)
		if a.chunk > 0 && n > a.chunk {
			n = lastLineEnd(b[:a.chunk])
			if n == 0 { // one line longer than a chunk: whole, alone
				n = lineEnd(b)
			}
		}
		if a.out == nil {
			a.lost(b[:n], os.ErrClosed)
		} else if _, err := a.out.Write(b[:n]); err != nil {
			a.lost(b[:n], err)
		}
		b = b[n:]
	}
}

// lost counts the lines of b as dropped and says so, at most once a minute.
// +checklocks:a.wmu
func (a *accessLog) lost(b []byte, err error) {
	for _, c := range b {
		if c == '\n' {
			a.dropped++
		}
	}
	if now := time.Now(); now.Sub(a.warned) >= time.Minute {
		a.warned = now
		a.log.Error("writing the access log", "error", err, "lines_dropped", a.dropped)
	}
}

// lastLineEnd returns the length of b up to and including its last newline,
// or 0 when it has none.
func lastLineEnd(b []byte) int {
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '\n' {
			return i + 1
		}
	}
	return 0
}

// lineEnd returns the length of b's first line, newline included.
func lineEnd(b []byte) int {
	for i, c := range b {
		if c == '\n' {
			return i + 1
		}
	}
	return len(b)
}

// appendJSON appends e as a JSON object line. The fields come in a fixed
// order and numbers are integers, so that a line can be read by eye and by
// line-oriented tools as well as by JSON parsers.
func appendJSON(b []byte, e *accessEntry) []byte {
	b = append(b, `{"time":"`...)
	b = e.end.UTC().AppendFormat(b, "2006-01-02T15:04:05.000Z07:00")
	b = append(b, `","worker":`...)
	b = strconv.AppendUint(b, uint64(e.workerID), 10)
	b = append(b, `,"client":`...)
	b = appendJSONString(b, e.client)
	b = append(b, `,"method":`...)
	b = appendJSONString(b, e.method)
	b = append(b, `,"path":`...)
	b = appendJSONString(b, e.path)
	b = append(b, `,"proto":`...)
	b = appendJSONString(b, e.proto)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(e.status), 10)
	b = append(b, `,"bytes":`...)
	b = strconv.AppendInt(b, e.bytes, 10)
	b = append(b, `,"duration_us":`...)
	b = strconv.AppendInt(b, e.dur.Microseconds(), 10)
	b = append(b, `,"referer":`...)
	b = appendJSONString(b, e.referer)
	b = append(b, `,"user_agent":`...)
	b = appendJSONString(b, e.agent)
	return append(b, "}\n"...)
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string: quotes, backslashes and
// control characters escaped, invalid UTF-8 replaced by U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c < 0x20 || c == 0x7f:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, s[i:i+n]...)
		}
		i += n
	}
	return append(b, '"')
}

// appendCombined appends e in the combined format:
//
//	client - - [time] "method path proto" status bytes "referer" "user agent"
//
// with nginx's escaping: quotes, backslashes and bytes outside printable
// ASCII as \xHH. An empty referer or user agent is "-".
func appendCombined(b []byte, e *accessEntry) []byte {
	b = appendEscaped(b, e.client)
	b = append(b, " - - ["...)
	b = e.end.UTC().AppendFormat(b, "02/Jan/2006:15:04:05 -0700")
	b = append(b, `] "`...)
	b = appendEscaped(b, e.method)
	b = append(b, ' ')
	b = appendEscaped(b, e.path)
	b = append(b, ' ')
	b = appendEscaped(b, e.proto)
	b = append(b, `" `...)
	b = strconv.AppendInt(b, int64(e.status), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, e.bytes, 10)
	b = append(b, ` "`...)
	b = appendEscaped(b, orDash(e.referer))
	b = append(b, `" "`...)
	b = appendEscaped(b, orDash(e.agent))
	return append(b, "\"\n"...)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func appendEscaped(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '"' || c == '\\' || c < 0x20 || c >= 0x7f {
			b = append(b, '\\', 'x', hexDigits[c>>4], hexDigits[c&0xf])
			continue
		}
		b = append(b, c)
	}
	return b
}

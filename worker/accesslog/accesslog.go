// Package accesslog formats a worker's access log lines (JSON, the NCSA
// combined format, or combined after the request's host) and buffers them out to the pipe the supervisor gave the
// worker (docs/DESIGN.md §6.4), never waiting on it in a round.
package accesslog

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/gatehouse-dev/gatehouse/worker/httphead"
	"github.com/hashicorp/go-hclog"
)

// accessFormat is the access log's line format.
type accessFormat uint8

const (
	formatJSON          accessFormat = iota // one JSON object a line, fields in a fixed order
	formatCombined                          // the NCSA combined format, as nginx and Apache write it
	formatVHostCombined                     // the host, then combined (Apache's vhost_combined)
)

// Entry is what one access log line says about a response.
type Entry struct {
	End      time.Time
	Dur      time.Duration
	Method   string
	Host     string // the request's Host (or its target's authority), as received
	Path     string // without its query
	Query    string // the raw query, logged only with access_log_query: it may hold tokens
	Proto    string
	Status   int
	Bytes    int64
	Client   string // the client key, masked as configured
	Referer  string // its query is cut unless access_log_query
	Agent    string
	WorkerID uint32
}

// EntryFor fills an entry's request fields from a head, or "-" when the head
// never parsed.
func EntryFor(h *httphead.Head) Entry {
	e := Entry{Method: "-", Path: "-", Proto: "-"}
	if h == nil {
		return e
	}
	e.Method, e.Proto, e.Host = h.Method, h.Proto, h.Host
	if h.URL != nil {
		e.Path, e.Query = h.URL.Path, h.URL.RawQuery
	}
	e.Referer = h.Header.Get("Referer")
	e.Agent = h.Header.Get("User-Agent")
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

// Log buffers formatted lines and writes them to the pipe the
// supervisor gave it, when the buffer holds limit bytes or its oldest line is
// flushAfter old, whichever comes first (nginx's access_log buffer= flush=).
// The pipe is the worker's alone, so a flush is one write of whole lines;
// the supervisor copies them to the log (docs/DESIGN.md §6.4).
type Log struct {
	format     accessFormat // immutable
	query      bool         // log queries (access_log_query); immutable
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
	spare   []byte    // +checklocks:wmu
	dropped uint64    // lines lost to write errors; +checklocks:wmu
	warned  time.Time // when a write error was last logged; +checklocks:wmu
}

// New returns a log of format ("combined", "vhost_combined", else JSON)
// that writes its buffer out at limit bytes or flushAfter after its oldest
// line, once SetOut gave it a descriptor, and reports write errors to log.
// Queries (the request's and the referer's) are logged only when query is
// set: they may hold tokens.
func New(format string, query bool, limit int, flushAfter time.Duration, log hclog.Logger) *Log {
	a := &Log{query: query, limit: limit, flushAfter: flushAfter, log: log}
	switch format {
	case "combined":
		a.format = formatCombined
	case "vhost_combined":
		a.format = formatVHostCombined
	}
	a.buf = make([]byte, 0, max(limit, 4096)+4096)
	a.spare = make([]byte, 0, cap(a.buf))
	a.timer = time.AfterFunc(time.Hour, a.Flush)
	a.timer.Stop()
	return a
}

// Ready reports whether the log has a descriptor to write to. It never
// waits for a write.
func (a *Log) Ready() bool { return a.hasOut.Load() }

// Add formats e into the buffer and writes the buffer out when it is full.
func (a *Log) Add(e *Entry) {
	en := *e
	if !a.query {
		en.Query, en.Referer = "", stripQuery(en.Referer)
	}
	a.mu.Lock()
	switch a.format {
	case formatCombined:
		a.buf = appendCombined(a.buf, &en)
	case formatVHostCombined:
		a.buf = appendHostToken(a.buf, en.Host)
		a.buf = append(a.buf, ' ')
		a.buf = appendCombined(a.buf, &en)
	default:
		a.buf = appendJSON(a.buf, &en)
	}
	full := len(a.buf) >= a.limit
	if !full && !a.armed {
		a.armed = true
		a.timer.Reset(a.flushAfter)
	}
	a.mu.Unlock()
	if full {
		a.Flush()
	}
}

// Flush writes out what is buffered.
func (a *Log) Flush() {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	a.flushLocked()
}

// +checklocks:a.wmu
func (a *Log) flushLocked() {
	a.mu.Lock()
	b := a.buf
	a.buf = a.spare[:0]
	a.armed = false
	a.timer.Stop()
	a.mu.Unlock()
	a.write(b)
	a.spare = b[:0]
}

// SetOut makes f, the write end of the pipe, the descriptor lines go to. It
// is given once, after Hello.
func (a *Log) SetOut(f *os.File) {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	if a.out != nil {
		a.flushLocked()
		a.out.Close()
	}
	a.out = f
	a.hasOut.Store(true)
}

// write writes b, whole lines.
// +checklocks:a.wmu
func (a *Log) write(b []byte) {
	if len(b) == 0 {
		return
	}
	if a.out == nil {
		a.lost(b, os.ErrClosed)
	} else if _, err := a.out.Write(b); err != nil {
		a.lost(b, err)
	}
}

// lost counts the lines of b as dropped and says so, at most once a minute.
// +checklocks:a.wmu
func (a *Log) lost(b []byte, err error) {
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

// appendJSON appends e as a JSON object line. The fields come in a fixed
// order and numbers are integers, so that a line can be read by eye and by
// line-oriented tools as well as by JSON parsers.
func appendJSON(b []byte, e *Entry) []byte {
	b = append(b, `{"time":"`...)
	b = e.End.UTC().AppendFormat(b, "2006-01-02T15:04:05.000Z07:00")
	b = append(b, `","worker":`...)
	b = strconv.AppendUint(b, uint64(e.WorkerID), 10)
	b = append(b, `,"client":`...)
	b = appendJSONString(b, e.Client)
	b = append(b, `,"host":"`...)
	start := len(b)
	b = lowerFrom(appendJSONChars(b, hostName(e.Host)), start)
	b = append(b, `","method":`...)
	b = appendJSONString(b, e.Method)
	b = append(b, `,"path":"`...)
	b = appendJSONChars(b, e.Path)
	if e.Query != "" {
		b = append(b, '?')
		b = appendJSONChars(b, e.Query)
	}
	b = append(b, '"')
	b = append(b, `,"proto":`...)
	b = appendJSONString(b, e.Proto)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(e.Status), 10)
	b = append(b, `,"bytes":`...)
	b = strconv.AppendInt(b, e.Bytes, 10)
	b = append(b, `,"duration_us":`...)
	b = strconv.AppendInt(b, e.Dur.Microseconds(), 10)
	b = append(b, `,"referer":`...)
	b = appendJSONString(b, e.Referer)
	b = append(b, `,"user_agent":`...)
	b = appendJSONString(b, e.Agent)
	return append(b, "}\n"...)
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string: quotes, backslashes and
// control characters escaped (C0, DEL and C1: U+0080–U+009F, whose CSI
// U+009B a terminal would obey as ESC [), invalid UTF-8 replaced by U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	return append(appendJSONChars(b, s), '"')
}

// appendJSONChars appends s escaped as in a JSON string, without quotes.
func appendJSONChars(b []byte, s string) []byte {
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
		switch {
		case r == utf8.RuneError && n == 1:
			b = append(b, `\ufffd`...)
		case r <= 0x9f: // C1
			b = append(b, '\\', 'u', '0', '0', hexDigits[r>>4], hexDigits[r&0xf])
		default:
			b = append(b, s[i:i+n]...)
		}
		i += n
	}
	return b
}

// hostName is a Host value's name as nginx's $host gives it: without port,
// brackets or trailing dot (appendJSON and appendHostToken lower its case).
// It slices h: the log allocates nothing.
func hostName(h string) string {
	if strings.HasPrefix(h, "[") {
		if end := strings.IndexByte(h, ']'); end > 0 {
			return h[1:end]
		}
	} else if i := strings.IndexByte(h, ':'); i >= 0 {
		h = h[:i]
	}
	return strings.TrimSuffix(h, ".")
}

// lowerFrom lowers the ASCII letters of b[from:]: a host's case, which
// carries no meaning. The escapes written there are lower case already.
func lowerFrom(b []byte, from int) []byte {
	for i := from; i < len(b); i++ {
		if 'A' <= b[i] && b[i] <= 'Z' {
			b[i] += 'a' - 'A'
		}
	}
	return b
}

// appendHostToken appends the vhost_combined format's first field: the
// request's host name (hostName), lower case, every byte but a letter, a
// digit and ".-_~%!$&'()*+,;=:" as \xHH, so that the field holds no space
// and the line can begin with neither "<" (a journald priority) nor an
// upper-case timestamp (the supervisor's own lines); "-" when there is none.
func appendHostToken(b []byte, host string) []byte {
	host = hostName(host)
	if host == "" {
		return append(b, '-')
	}
	for i := 0; i < len(host); i++ {
		c := host[i]
		switch {
		case 'A' <= c && c <= 'Z':
			b = append(b, c+'a'-'A')
		case hostTokenByte(c):
			b = append(b, c)
		default:
			b = append(b, '\\', 'x', hexDigits[c>>4], hexDigits[c&0xf])
		}
	}
	return b
}

// hostTokenByte reports whether c stands for itself in the host token.
func hostTokenByte(c byte) bool {
	return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || strings.IndexByte(".-_~%!$&'()*+,;=:", c) >= 0
}

// appendCombined appends e in the combined format:
//
//	client - - [time] "method path proto" status bytes "referer" "user agent"
//
// with nginx's escaping: quotes, backslashes and bytes outside printable
// ASCII as \xHH. An empty referer or user agent is "-". The vhost_combined
// format is the host (appendHostToken) and a space before it.
func appendCombined(b []byte, e *Entry) []byte {
	b = appendEscaped(b, e.Client)
	b = append(b, " - - ["...)
	b = e.End.UTC().AppendFormat(b, "02/Jan/2006:15:04:05 -0700")
	b = append(b, `] "`...)
	b = appendEscaped(b, e.Method)
	b = append(b, ' ')
	b = appendEscaped(b, e.Path)
	if e.Query != "" {
		b = append(b, '?')
		b = appendEscaped(b, e.Query)
	}
	b = append(b, ' ')
	b = appendEscaped(b, e.Proto)
	b = append(b, `" `...)
	b = strconv.AppendInt(b, int64(e.Status), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, e.Bytes, 10)
	b = append(b, ` "`...)
	b = appendEscaped(b, orDash(e.Referer))
	b = append(b, `" "`...)
	b = appendEscaped(b, orDash(e.Agent))
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

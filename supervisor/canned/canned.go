// Package canned holds the supervisor's canned replies: the fixed responses
// the dispatcher writes itself, without blocking, before it shuts a
// connection down. Each carries a Date (RFC 9110 §6.6.1: an origin server
// with a clock MUST send one), rewritten in place at most once a second,
// when a reply is written in a new second; the loop never formats a date it
// does not send and never wakes up to keep one current.
package canned

import (
	"math"
	"net/http"
	"time"
)

// dateLen is the length of an HTTP-date in http.TimeFormat (IMF-fixdate).
const dateLen = len("Mon, 02 Jan 2006 15:04:05 GMT")

// Reply is one canned response and the second its Date holds. Owned by the
// loop.
type Reply struct {
	b      []byte
	dateAt int   // offset of the Date value in b
	sec    int64 // the Unix second formatted there (math.MinInt64: none yet)
}

// newReply builds a reply from a status line and the rest of the
// response, with a Date field between them.
func newReply(status, rest string) Reply {
	head := status + "\r\nDate: "
	b := []byte(head + string(make([]byte, dateLen)) + "\r\n" + rest)
	return Reply{b: b, dateAt: len(head), sec: math.MinInt64}
}

// At returns the reply with its Date set to now's second. It allocates
// nothing: the date is formatted on the stack and copied into its place.
func (r *Reply) At(now time.Time) []byte {
	if s := now.Unix(); s != r.sec {
		r.sec = s
		var buf [64]byte
		if d := now.UTC().AppendFormat(buf[:0], http.TimeFormat); len(d) == dateLen {
			copy(r.b[r.dateAt:], d)
		}
	}
	return r.b
}

// Replies are the dispatcher's canned responses.
type Replies struct {
	// RequestTimeout (408) answers a head that did not arrive within the head deadline
	// or the inter-byte gap (docs/DESIGN.md §2.4).
	RequestTimeout Reply
	// NoWorker (503) answers a readable connection that found no worker for
	// no_worker_timeout (docs/DESIGN.md §2.9).
	NoWorker Reply
	// PlainToTLS (400) answers plain HTTP sent to a TLS listener, as nginx does.
	PlainToTLS Reply
}

// NewReplies builds the replies, each with no Date yet.
func NewReplies() Replies {
	return Replies{
		RequestTimeout: newReply("HTTP/1.1 408 Request Timeout",
			"Content-Type: text/plain; charset=utf-8\r\n"+
				"Content-Length: 16\r\n"+
				"Connection: close\r\n"+
				"X-Content-Type-Options: nosniff\r\n"+
				"\r\n"+
				"request timeout\n"),
		NoWorker: newReply("HTTP/1.1 503 Service Unavailable",
			"Content-Type: text/plain; charset=utf-8\r\n"+
				"Content-Length: 20\r\n"+
				"Retry-After: 5\r\n"+
				"Connection: close\r\n"+
				"X-Content-Type-Options: nosniff\r\n"+
				"\r\n"+
				"no worker available\n"),
		PlainToTLS: newReply("HTTP/1.1 400 Bad Request",
			"Content-Type: text/plain; charset=utf-8\r\n"+
				"Content-Length: 51\r\n"+
				"Connection: close\r\n"+
				"X-Content-Type-Options: nosniff\r\n"+
				"\r\n"+
				"The plain HTTP request was sent to an HTTPS port.\r\n"),
	}
}

package supervisor

import (
	"math"
	"net/http"
	"time"
)

// Canned replies: the fixed responses the dispatcher writes itself, without
// blocking, before it shuts a connection down. Each carries a Date (RFC 9110
// §6.6.1: an origin server with a clock MUST send one), rewritten in place
// at most once a second, when a reply is written in a new second; the loop
// never formats a date it does not send and never wakes up to keep one
// current.

// dateLen is the length of an HTTP-date in http.TimeFormat (IMF-fixdate).
const dateLen = len("Mon, 02 Jan 2006 15:04:05 GMT")

// cannedReply is one canned response and the second its Date holds. Owned
// by the loop.
type cannedReply struct {
	b      []byte
	dateAt int   // offset of the Date value in b
	sec    int64 // the Unix second formatted there (math.MinInt64: none yet)
}

// newCannedReply builds a reply from a status line and the rest of the
// response, with a Date field between them.
func newCannedReply(status, rest string) cannedReply {
	head := status + "\r\nDate: "
	b := []byte(head + string(make([]byte, dateLen)) + "\r\n" + rest)
	return cannedReply{b: b, dateAt: len(head), sec: math.MinInt64}
}

// at returns the reply with its Date set to now's second. It allocates
// nothing: the date is formatted on the stack and copied into its place.
func (r *cannedReply) at(now time.Time) []byte {
	if s := now.Unix(); s != r.sec {
		r.sec = s
		var buf [64]byte
		if d := now.UTC().AppendFormat(buf[:0], http.TimeFormat); len(d) == dateLen {
			copy(r.b[r.dateAt:], d)
		}
	}
	return r.b
}

// cannedReplies are the dispatcher's canned responses.
type cannedReplies struct {
	// r408 answers a head that did not arrive within the head deadline
	// or the inter-byte gap (docs/DESIGN.md §2.4).
	r408 cannedReply
	// r503 answers a readable connection that found no worker for
	// no_worker_timeout (docs/DESIGN.md §2.9).
	r503 cannedReply
	// r400TLS answers plain HTTP sent to a TLS listener, as nginx does.
	r400TLS cannedReply
}

func newCannedReplies() cannedReplies {
	return cannedReplies{
		r408: newCannedReply("HTTP/1.1 408 Request Timeout",
			"Content-Type: text/plain; charset=utf-8\r\n"+
				"Content-Length: 16\r\n"+
				"Connection: close\r\n"+
				"X-Content-Type-Options: nosniff\r\n"+
				"\r\n"+
				"request timeout\n"),
		r503: newCannedReply("HTTP/1.1 503 Service Unavailable",
			"Content-Type: text/plain; charset=utf-8\r\n"+
				"Content-Length: 20\r\n"+
				"Retry-After: 5\r\n"+
				"Connection: close\r\n"+
				"X-Content-Type-Options: nosniff\r\n"+
				"\r\n"+
				"no worker available\n"),
		r400TLS: newCannedReply("HTTP/1.1 400 Bad Request",
			"Content-Type: text/plain; charset=utf-8\r\n"+
				"Content-Length: 51\r\n"+
				"Connection: close\r\n"+
				"X-Content-Type-Options: nosniff\r\n"+
				"\r\n"+
				"The plain HTTP request was sent to an HTTPS port.\r\n"),
	}
}

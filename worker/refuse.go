package worker

import (
	"errors"
	"io"
	"net"
	"net/http"

	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/worker/access"
	"github.com/gatehouse-dev/gatehouse/worker/httphead"
)

// refusal is an answer the worker gives in place of a handler's. Every
// refusal of a round goes through refuse, which writes it one of three
// ways:
//   - keep: through the round's response, as a handler's answer: its
//     framing, keep-alive, site headers, and the route's error page for
//     the status (429 and 503 of the rate check, 401, 403 and 429 of the
//     access phase);
//   - status 0: nothing is written and the connection closes (the client
//     closed or reset it before a head);
//   - otherwise a transport error, written straight to the connection
//     with Connection: close, the error page for the status and
//     Retry-After: 5 on a 429 or 503 (writeError); the connection lingers.
type refusal struct {
	status int
	// field and value are the one header that goes with the status
	// (Retry-After, Allow, WWW-Authenticate), if any.
	field, value string
	// text is a kept refusal's body, a closing one's reason (logged).
	text string
	// outcome is a closing refusal's, reported in Done.
	outcome proto.Outcome
	keep    bool
}

// refused reports whether r refuses anything: the zero refusal lets the
// round go on.
func (r refusal) refused() bool { return r.status != 0 || r.outcome != 0 }

// keptRefusal is access's refusal, which keeps the connection.
func keptRefusal(r access.Refusal) refusal {
	return refusal{status: r.Status, field: r.Field, value: r.Value, text: r.Text, keep: true}
}

// refuse writes r for the round of head (nil when no head parsed) and
// returns the connection's disposition: KEEP_ALIVE after a kept refusal,
// whose round goes on to finish its response.
func (cs *connServer) refuse(head *httphead.Head, r refusal) proto.Disposition {
	switch {
	case r.keep:
		if r.field != "" {
			cs.rw.Header().Set(r.field, r.value)
		}
		http.Error(cs.rw, r.text, r.status)
		return proto.Disposition_KEEP_ALIVE
	case r.status == 0:
		cs.outcome = r.outcome
		return proto.Disposition_CLOSE
	}
	cs.outcome = r.outcome
	var extra http.Header
	if r.field != "" {
		extra = http.Header{r.field: {r.value}}
	}
	cs.writeError(r.status, r.text, head, extra)
	return proto.Disposition_LINGER
}

// headRefusal is the answer to a head that could not be read: 400 (or the
// parser's status) or 408, or a quiet close.
func headRefusal(err error) refusal {
	var he *httphead.Error
	var ne net.Error
	switch {
	case errors.Is(err, io.EOF):
		return refusal{outcome: proto.Outcome_PEER_CLOSED}
	case errors.As(err, &he):
		return refusal{status: he.Status, text: string(he.Code), outcome: proto.Outcome_BAD_REQUEST}
	case errors.As(err, &ne) && ne.Timeout():
		return refusal{status: http.StatusRequestTimeout, text: "request head not received in time", outcome: proto.Outcome_TIMEOUT}
	}
	return refusal{outcome: proto.Outcome_PEER_RESET}
}

// bodyRefusal is the transport's answer to a body it refused with status
// (bodyErrorStatus, bufferBody): 408 is a timeout, a 503 (no room to
// receive it) no fault of the client's.
func bodyRefusal(status int, why string) refusal {
	r := refusal{status: status, text: why, outcome: proto.Outcome_BAD_REQUEST}
	switch status {
	case http.StatusRequestTimeout:
		r.outcome = proto.Outcome_TIMEOUT
	case http.StatusServiceUnavailable:
		r.outcome = proto.Outcome_OK
	}
	return r
}

package worker

import (
	"errors"
	"io"
	"net"
	"net/http"

	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/worker/httphead"
)

// headError answers a head that could not be read, or closes quietly.
func (cs *connServer) headError(err error) proto.Disposition {
	var he *httphead.Error
	var ne net.Error
	switch {
	case errors.Is(err, io.EOF):
		cs.outcome = proto.Outcome_PEER_CLOSED
		return proto.Disposition_CLOSE
	case errors.As(err, &he):
		cs.outcome = proto.Outcome_BAD_REQUEST
		cs.writeError(he.Status, string(he.Code), nil, nil)
		return proto.Disposition_LINGER
	case errors.As(err, &ne) && ne.Timeout():
		cs.outcome = proto.Outcome_TIMEOUT
		cs.writeError(http.StatusRequestTimeout, "request head not received in time", nil, nil)
		return proto.Disposition_LINGER
	}
	cs.outcome = proto.Outcome_PEER_RESET
	return proto.Disposition_CLOSE
}

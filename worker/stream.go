package worker

import (
	"context"

	"github.com/gatehouse-dev/gatehouse/proto"
)

// leavePool moves the connection from the request pool to the stream budget
// (docs/DESIGN.md §10): StreamStart gives the pool slot and the client's
// share back and charges the budget instead. It reports false when the
// budget has no room; the caller answers 503 at once. The dispatch then ends
// with this round: the connection goes back to the supervisor, which
// releases the budget, rather than serving another round without a slot.
func (cs *connServer) leavePool(ctx context.Context, upgrade bool) bool {
	if cs.streamed {
		return true
	}
	// As for a body (bufferBody): the worker's count drops before the
	// supervisor's, so it never counts fewer than the supervisor may
	// dispatch.
	cs.w.active.Add(-1)
	r, err := cs.w.calls.call(ctx, &proto.Frame{Body: &proto.Frame_StreamStart{StreamStart: &proto.StreamStart{ConnId: cs.d.GetConnId(), Upgrade: upgrade}}}, nil)
	if err != nil || !r.f.GetStreamReply().GetOk() {
		cs.w.active.Add(1)
		return false
	}
	cs.outside = true
	cs.streamed = true
	return true
}

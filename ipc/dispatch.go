package ipc

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/gatehouse-dev/gatehouse/proto"
	"google.golang.org/protobuf/encoding/protowire"
	pb "google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Field numbers of the Dispatch fields DispatchEncoder writes itself, taken
// from the schema so that they cannot drift from it.
var (
	frameDispatchField = fieldNumber(&proto.Frame{}, "dispatch")
	dispatchPeerField  = fieldNumber(&proto.Dispatch{}, "peer")
	dispatchKeyField   = fieldNumber(&proto.Dispatch{}, "client_key")
)

func fieldNumber(m pb.Message, name protoreflect.Name) protowire.Number {
	return m.ProtoReflect().Descriptor().Fields().ByName(name).Number()
}

// DispatchEncoder encodes Dispatch frames into buffers it reuses, so that the
// dispatcher's hand-off allocates nothing per round: the peer address and the
// client key are appended from their netip forms instead of being formatted
// into strings first. The zero value is ready to use; it is not safe for
// concurrent use.
type DispatchEncoder struct {
	frame, inner, text []byte
}

// Encode returns the encoding of a Frame (id 0) whose body is d with peer and
// key as its peer and client_key, which must be empty in d itself. The bytes
// stay valid until the next Encode.
func (e *DispatchEncoder) Encode(d *proto.Dispatch, peer netip.AddrPort, key netip.Addr) ([]byte, error) {
	if d.GetPeer() != "" || d.GetClientKey() != "" {
		return nil, errors.New("ipc: Dispatch with its peer or client key already set")
	}
	inner, err := pb.MarshalOptions{}.MarshalAppend(e.inner[:0], d)
	if err != nil {
		return nil, fmt.Errorf("ipc: encoding frame: %w", err)
	}
	if peer.IsValid() {
		e.text = peer.AppendTo(e.text[:0])
		inner = protowire.AppendTag(inner, dispatchPeerField, protowire.BytesType)
		inner = protowire.AppendBytes(inner, e.text)
	}
	if key.IsValid() {
		e.text = key.AppendTo(e.text[:0])
		inner = protowire.AppendTag(inner, dispatchKeyField, protowire.BytesType)
		inner = protowire.AppendBytes(inner, e.text)
	}
	e.inner = inner
	b := protowire.AppendTag(e.frame[:0], frameDispatchField, protowire.BytesType)
	b = protowire.AppendBytes(b, inner)
	e.frame = b
	if len(b) > MaxFrameSize {
		return nil, fmt.Errorf("ipc: frame of %d bytes exceeds %d", len(b), MaxFrameSize)
	}
	return b, nil
}

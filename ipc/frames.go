package ipc

import (
	"fmt"
	"reflect"

	"github.com/gatehouse-dev/gatehouse/proto"
	pb "google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// The protocol's map as the channel sees it: one Spec per field of
// proto.Frame's body, read from the options the schema declares on it
// (sender, role, fd, fd_if in proto/gatehouse.proto). Nothing here lists the
// frames again: a new frame states who sends it, its role and its
// descriptors once, on its field, and decode's descriptor rule, the
// supervisor's frame table and the worker's reply routing follow.

// Kind names a frame's type: its body's field number in proto.Frame, 0 for
// a frame without a body. It indexes the protocol's tables (MaxKind bounds
// it) without a switch over the types.
type Kind uint8

// Spec is one frame type of the protocol.
type Spec struct {
	Kind Kind
	// Name is the body's message name ("Dispatch").
	Name string
	// From is the end that sends it.
	From proto.Sender
	// Role is how it pairs with others by id.
	Role proto.Role
	// fd: exactly one descriptor; fdIf: one iff that bool field of the
	// body is true. Neither: none.
	fd   bool
	fdIf protoreflect.FieldDescriptor
	// body is the field of proto.Frame that holds it.
	body protoreflect.FieldDescriptor
}

// FDs is how many descriptors f, a frame of s, must carry.
func (s *Spec) FDs(f *proto.Frame) int {
	switch {
	case s.fd:
		return 1
	case s.fdIf != nil && s.Body(f).Get(s.fdIf).Bool():
		return 1
	}
	return 0
}

// MayCarry reports whether a frame of s carries a descriptor in some case.
func (s *Spec) MayCarry() bool { return s.fd || s.fdIf != nil }

// Descriptors says which descriptors a frame of s carries, as the protocol's
// documents put it: "none", "exactly one" or "one iff `field`".
func (s *Spec) Descriptors() string {
	switch {
	case s.fd:
		return "exactly one"
	case s.fdIf != nil:
		return fmt.Sprintf("one iff `%s`", s.fdIf.Name())
	}
	return "none"
}

// MaxKind bounds every Kind: an array of MaxKind+1 entries is indexed by
// any.
const MaxKind = 63

var (
	bodyOneof = (&proto.Frame{}).ProtoReflect().Descriptor().Oneofs().ByName("body")
	specs     [MaxKind + 1]*Spec
	specList  []*Spec
	// kinds maps the Go type of each body (its oneof wrapper) to its kind:
	// a lookup of a few nanoseconds where WhichOneof takes tens.
	kinds = map[reflect.Type]Kind{}
)

func init() {
	fields := bodyOneof.Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if fd.Number() > MaxKind {
			panic(fmt.Sprintf("ipc: Frame field %s has number %d, over MaxKind", fd.Name(), fd.Number()))
		}
		opts := fd.Options()
		s := &Spec{
			Kind: Kind(fd.Number()),
			Name: string(fd.Message().Name()),
			From: pb.GetExtension(opts, proto.E_Sender).(proto.Sender),
			Role: pb.GetExtension(opts, proto.E_Role).(proto.Role),
			fd:   pb.GetExtension(opts, proto.E_Fd).(bool),
			body: fd,
		}
		if name := pb.GetExtension(opts, proto.E_FdIf).(string); name != "" {
			s.fdIf = fd.Message().Fields().ByName(protoreflect.Name(name))
			if s.fdIf == nil || s.fdIf.Kind() != protoreflect.BoolKind || s.fd {
				panic(fmt.Sprintf("ipc: Frame field %s: fd_if %q is no bool field of %s, or fd is set too", fd.Name(), name, s.Name))
			}
		}
		if s.From == proto.Sender_SENDER_UNSPECIFIED {
			panic(fmt.Sprintf("ipc: Frame field %s declares no sender", fd.Name()))
		}
		specs[s.Kind] = s
		specList = append(specList, s)
		kinds[reflect.TypeOf(s.New().Body)] = s.Kind
	}
}

// KindOf is f's frame type, from the body's oneof field (0 without a body).
func KindOf(f *proto.Frame) Kind {
	if f.Body == nil {
		return 0
	}
	return kinds[reflect.TypeOf(f.Body)]
}

// SpecOf is the Spec of f's type, nil for a frame without a body.
func SpecOf(f *proto.Frame) *Spec { return specs[KindOf(f)] }

// SpecOfKind is the Spec of frame type k, nil for no type.
func SpecOfKind(k Kind) *Spec { return specs[k] }

// Specs lists every frame type, in the schema's order of Frame's fields.
func Specs() []*Spec { return specList }

// SpecNamed is the Spec of the frame type whose body message is name, nil
// for none.
func SpecNamed(name string) *Spec {
	for _, s := range specList {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// New returns a frame (id 0) of type s with an empty body, whose fields
// Body reaches by reflection.
func (s *Spec) New() *proto.Frame {
	f := &proto.Frame{}
	m := f.ProtoReflect()
	m.Set(s.body, protoreflect.ValueOfMessage(m.NewField(s.body).Message()))
	return f
}

// Body is f's body, a frame of type s, for reflection.
func (s *Spec) Body(f *proto.Frame) protoreflect.Message {
	return f.ProtoReflect().Get(s.body).Message()
}

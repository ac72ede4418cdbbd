package wsframe

import (
	"bufio"
	"bytes"
	"testing"
)

// RFC 6455 §1.3's example handshake.
func TestAccept(t *testing.T) {
	if got, want := Accept("dGhlIHNhbXBsZSBub25jZQ=="), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="; got != want {
		t.Fatalf("Accept = %q, want %q", got, want)
	}
}

// Each length encoding (7-bit, 16-bit, 64-bit) round-trips, masked and not,
// and a masked frame's bytes on the wire differ from its payload.
func TestRoundTrip(t *testing.T) {
	mask := [4]byte{0x37, 0xfa, 0x21, 0x3d}
	for _, n := range []int{0, 1, 125, 126, 65535, 65536, 200000} {
		payload := make([]byte, n)
		for i := range payload {
			payload[i] = byte(i * 7)
		}
		for _, m := range []*[4]byte{nil, &mask} {
			frame := Append(nil, OpBinary, payload, m)
			if m != nil && n > 0 && bytes.Contains(frame, payload) {
				t.Fatalf("n=%d: the masked frame carries the payload in clear", n)
			}
			op, got, err := Read(bufio.NewReader(bytes.NewReader(frame)), nil)
			if err != nil || op != OpBinary || !bytes.Equal(got, payload) {
				t.Fatalf("n=%d masked=%v: op %d, %d bytes, err %v", n, m != nil, op, len(got), err)
			}
		}
	}
}

func TestReadRefusesFragmentsAndOversize(t *testing.T) {
	if _, _, err := Read(bufio.NewReader(bytes.NewReader([]byte{0x02, 0x00})), nil); err == nil {
		t.Fatal("a non-final frame was accepted")
	}
	over := []byte{0x82, 127, 0, 0, 0, 0, 0x10, 0, 0, 1}
	if _, _, err := Read(bufio.NewReader(bytes.NewReader(over)), nil); err == nil {
		t.Fatal("a frame over MaxPayload was accepted")
	}
}

// Package wsframe is the least of RFC 6455 the benchmark's WebSocket echo
// needs: the handshake's accept value, and one frame written or read whole
// (no fragmentation, no extensions). The echo upstream and the load client
// share it, so the module needs no WebSocket dependency.
package wsframe

import (
	"bufio"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Opcodes the bench uses (RFC 6455 §5.2).
const (
	OpText   = 0x1
	OpBinary = 0x2
	OpClose  = 0x8
	OpPing   = 0x9
	OpPong   = 0xA
)

// MaxPayload bounds a frame read: the bench's messages are far smaller.
const MaxPayload = 16 << 20

// Accept returns the Sec-WebSocket-Accept value for a Sec-WebSocket-Key.
func Accept(key string) string {
	h := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	return base64.StdEncoding.EncodeToString(h[:])
}

// Append appends one final frame of op carrying payload to b, masked with
// mask when mask is non-nil (a client's frames must be, a server's not).
func Append(b []byte, op byte, payload []byte, mask *[4]byte) []byte {
	b = append(b, 0x80|op)
	m := byte(0)
	if mask != nil {
		m = 0x80
	}
	switch n := len(payload); {
	case n < 126:
		b = append(b, m|byte(n))
	case n <= 0xFFFF:
		b = append(b, m|126)
		b = binary.BigEndian.AppendUint16(b, uint16(n))
	default:
		b = append(b, m|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	if mask == nil {
		return append(b, payload...)
	}
	b = append(b, mask[:]...)
	start := len(b)
	b = append(b, payload...)
	for i := range payload {
		b[start+i] ^= mask[i&3]
	}
	return b
}

// Read reads one frame into buf (grown as needed) and returns its opcode
// and its unmasked payload, which aliases buf. A fragmented frame is an
// error: neither side of the bench sends one.
func Read(r *bufio.Reader, buf []byte) (op byte, payload []byte, err error) {
	var h [2]byte
	if _, err = io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	if h[0]&0x80 == 0 {
		return 0, nil, errors.New("wsframe: fragmented frame")
	}
	op = h[0] & 0x0F
	n := uint64(h[1] & 0x7F)
	switch n {
	case 126:
		var e [2]byte
		if _, err = io.ReadFull(r, e[:]); err != nil {
			return 0, nil, err
		}
		n = uint64(binary.BigEndian.Uint16(e[:]))
	case 127:
		var e [8]byte
		if _, err = io.ReadFull(r, e[:]); err != nil {
			return 0, nil, err
		}
		n = binary.BigEndian.Uint64(e[:])
	}
	if n > MaxPayload {
		return 0, nil, fmt.Errorf("wsframe: %d-byte frame", n)
	}
	var mask [4]byte
	masked := h[1]&0x80 != 0
	if masked {
		if _, err = io.ReadFull(r, mask[:]); err != nil {
			return 0, nil, err
		}
	}
	if uint64(cap(buf)) < n {
		buf = make([]byte, n)
	}
	payload = buf[:n]
	if _, err = io.ReadFull(r, payload); err != nil {
		return 0, nil, err
	}
	if masked {
		for i := range payload {
			payload[i] ^= mask[i&3]
		}
	}
	return op, payload, nil
}

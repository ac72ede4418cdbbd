// Package headend finds where an HTTP/1.1 request head ends by looking at
// bytes only. The supervisor uses it to hand a worker only connections whose
// input holds a complete head, and the worker to return a connection whose
// pipelined input holds only part of the next one; neither interprets a
// header with it.
//
// It knows line endings and, of the request line, only its shape: a head is
// complete at its first empty line (CRLF CRLF after the request line). Input
// a head parser refuses whatever follows (a NUL, a CR not followed by LF, an
// LF without CR, too many empty lines before the request line, a request
// line that does not end in " HTTP/" DIGIT "." DIGIT) is reported as
// Invalid, so the caller passes it on at once for the parser to answer 400
// instead of waiting for an end that may never come: "GET /\r\n" (HTTP/0.9's
// request, or a line typed by hand) is answered at once, not after the
// inter-byte gap. Non-goals: validating anything else, header fields,
// bodies, TLS records.
package headend

import (
	"bytes"
	"time"
)

// The head timeouts, which the supervisor enforces on a head it holds and
// the worker on one it reads, so a client meets one rule wherever its head
// arrives (docs/DESIGN.md §2.4).
const (
	// Deadline bounds a head from its first byte.
	Deadline = 30 * time.Second
	// Gap bounds the silence between two bytes of a head.
	Gap = 5 * time.Second
)

// Status is what the bytes scanned so far say about the head.
type Status uint8

const (
	// Incomplete: no end yet; wait for more input.
	Incomplete Status = iota
	// Complete: the head ends within the input.
	Complete
	// Invalid: the input can never start a valid head; answer it now.
	Invalid
)

// MaxHead is the most input a head needs before a parser can decide about
// it: four empty lines, a request line of 8192 bytes, a header section of
// 32768 and the final CRLF (the worker's limits). Input this long without a
// complete head is an oversized head; pass it on for the parser to answer
// 414 or 431.
const MaxHead = 2*maxLeadingEmpty + 8192 + 32768 + 2

// maxLeadingEmpty is how many empty lines a head parser skips before the
// request line (RFC 9112 §2.2 says at least one; the worker skips four).
const maxLeadingEmpty = 4

// Decided reports whether in, the input of a connection from the start of a
// request, can be passed to the head parser without waiting for more: the
// head is complete, invalid, or oversized.
func Decided(in []byte) bool {
	st, _ := Scan(in, 0)
	return st != Incomplete || len(in) >= MaxHead
}

// Scan looks at in, the input of a connection from the start of a request,
// from offset from: 0, or the resume offset a previous Scan returned for a
// prefix of the same input, so that bytes are looked at once however the
// input arrives. It returns the status and, for Complete, the length of the
// head; for Incomplete, the offset to resume from once more input arrived.
func Scan(in []byte, from int) (st Status, n int) {
	// The empty lines a parser skips before the request line.
	i := 0
	for empties := 0; i+1 < len(in) && in[i] == '\r' && in[i+1] == '\n'; empties++ {
		if empties == maxLeadingEmpty {
			return Invalid, 0
		}
		i += 2
	}
	start := i // the request line's first byte
	i = max(i, from)
	for ; i < len(in); i++ {
		switch in[i] {
		case 0:
			return Invalid, 0
		case '\r':
			if i+1 == len(in) {
				return Incomplete, i
			}
			if in[i+1] != '\n' {
				return Invalid, 0
			}
		case '\n':
			if i == 0 || in[i-1] != '\r' {
				return Invalid, 0
			}
			// The request line ended (no LF before this one since its
			// start: a backward look over this line only, so each byte
			// is still looked at a bounded number of times).
			if bytes.LastIndexByte(in[start:i], '\n') < 0 && !versioned(in[start:i-1]) {
				return Invalid, 0
			}
			// A line ended; an empty line after it ends the head.
			switch {
			case i+1 == len(in):
				return Incomplete, i
			case in[i+1] != '\r':
			case i+2 == len(in):
				return Incomplete, i
			case in[i+2] == '\n':
				return Complete, i + 3
			default:
				return Invalid, 0
			}
		}
	}
	return Incomplete, len(in)
}

// versioned reports whether line, a request line without its CRLF, ends in
// SP HTTP-version (RFC 9112 §3): " HTTP/" DIGIT "." DIGIT. A line that does
// not can never be a valid request line, whatever follows it.
func versioned(line []byte) bool {
	n := len(line)
	if n < len(" HTTP/1.1") {
		return false
	}
	v := line[n-len(" HTTP/1.1"):]
	return string(v[:6]) == " HTTP/" && isDigit(v[6]) && v[7] == '.' && isDigit(v[8])
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

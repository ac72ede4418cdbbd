package httphead

import "strings"

// Byte classes of the HTTP grammar (RFC 9110 §5.6.2, §5.5).
const (
	classTchar     = 1 << iota // tchar: a byte of a token
	classFieldChar             // field-vchar, SP or HTAB: a byte of a field value
	classVchar                 // VCHAR: visible ASCII, 0x21-0x7E
	classHex                   // HEXDIG
	classQdtext                // qdtext: a byte of a quoted-string other than '\'
	classURI                   // a byte RFC 3986 allows in a URI: unreserved, reserved or '%'
)

// byteClass is immutable after package initialization.
var byteClass = func() (t [256]uint8) {
	for c := 0; c < 256; c++ {
		var k uint8
		switch {
		case c >= 0x21 && c <= 0x7e:
			k |= classVchar | classFieldChar
		case c >= 0x80:
			// obs-text is allowed in field values and quoted strings
			// (RFC 9110 §5.5) but never in tokens.
			k |= classFieldChar | classQdtext
		case c == ' ' || c == '\t':
			k |= classFieldChar | classQdtext
		}
		if c >= 0x21 && c <= 0x7e && c != '"' && c != '\\' {
			k |= classQdtext
		}
		if ('0' <= c && c <= '9') || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') {
			k |= classTchar
		}
		switch c {
		case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
			k |= classTchar
		}
		if ('0' <= c && c <= '9') || ('a' <= c && c <= 'f') || ('A' <= c && c <= 'F') {
			k |= classHex
		}
		// RFC 3986 §2: unreserved, gen-delims, sub-delims and the '%' of
		// a pct-encoded triplet. Not: SP, '"', '<', '>', '\\', '^', '`',
		// '{', '|', '}', controls, DEL and bytes >= 0x80.
		if ('0' <= c && c <= '9') || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') ||
			strings.IndexByte("-._~:/?#[]@!$&'()*+,;=%", byte(c)) >= 0 {
			k |= classURI
		}
		t[c] = k
	}
	return t
}()

func isTchar(c byte) bool { return byteClass[c]&classTchar != 0 }
func isHex(c byte) bool   { return byteClass[c]&classHex != 0 }
func isOWS(c byte) bool   { return c == ' ' || c == '\t' }

// isToken reports whether b is a non-empty token (RFC 9110 §5.6.2).
func isToken[T string | []byte](b T) bool {
	if len(b) == 0 {
		return false
	}
	for i := 0; i < len(b); i++ {
		if !isTchar(b[i]) {
			return false
		}
	}
	return true
}

// validValue reports whether every byte of b may appear in a field value:
// field-vchar, SP or HTAB (RFC 9110 §5.5). CR, LF, NUL, the other controls
// and DEL may not.
func validValue[T string | []byte](b T) bool {
	for i := 0; i < len(b); i++ {
		if byteClass[b[i]]&classFieldChar == 0 {
			return false
		}
	}
	return true
}

// ValidFieldName reports whether s may be sent as a field name: a
// non-empty token (RFC 9110 §5.1). Use it on response headers built from
// configuration or handler output before they reach the wire.
func ValidFieldName(s string) bool { return isToken(s) }

// ValidFieldValue reports whether s may be sent as a field value without
// changing the message's framing: it has no CR, LF, NUL, other control
// byte except HTAB, or DEL (RFC 9110 §5.5). Leading and trailing
// whitespace is allowed; the recipient strips it.
func ValidFieldValue(s string) bool { return validValue(s) }

// trimOWS removes optional whitespace (SP, HTAB) from both ends of b.
func trimOWS[T string | []byte](b T) T {
	for len(b) > 0 && isOWS(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isOWS(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

// asciiEqualFold reports whether a equals the lower-case ASCII string
// lower, ignoring ASCII case in a.
func asciiEqualFold[T string | []byte](a T, lower string) bool {
	if len(a) != len(lower) {
		return false
	}
	for i := 0; i < len(a); i++ {
		c := a[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

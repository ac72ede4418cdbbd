package httphead

import "bytes"

// OriginFromRaw returns the value of the first Origin field in the raw
// bytes of a request head that may be malformed or truncated, or "" when
// there is none or it is unusable. A server uses it to add CORS headers to
// the error response for a head that never parsed (docs/DESIGN.md §3.5).
//
// It looks only at complete lines (ending in LF, with an optional CR
// before it) after the first non-empty line (the request line) and before
// the first empty line (the end of the head). The field name must be
// "Origin" in any case, followed directly by the colon. The first such
// line decides: if its value is empty, longer than 320 bytes or has any
// byte outside visible ASCII, the result is "" rather than a later,
// possibly smuggled, Origin. A non-empty result always passes
// ValidFieldValue.
func OriginFromRaw(b []byte) string {
	startLine := true
	for {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			return ""
		}
		line := b[:i]
		b = b[i+1:]
		if n := len(line); n > 0 && line[n-1] == '\r' {
			line = line[:n-1]
		}
		if len(line) == 0 {
			if startLine {
				continue // RFC 9112 §2.2 empty lines before the request line
			}
			return ""
		}
		if startLine {
			startLine = false
			continue
		}
		const name = "origin:"
		if len(line) < len(name) || !asciiEqualFold(line[:len(name)], name) {
			continue
		}
		v := trimOWS(line[len(name):])
		if len(v) == 0 || len(v) > maxOriginLen {
			return ""
		}
		for _, c := range v {
			if byteClass[c]&classVchar == 0 {
				return ""
			}
		}
		return string(v)
	}
}

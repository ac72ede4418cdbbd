package httphead

import (
	"errors"
	"net/url"
	"strings"
)

// errPathNotNormal refuses a path whose percent-encoded slashes would make
// its decoded form climb or merge segments differently from its wire form.
// Its text is the 400's body, as it was when the worker held the rule.
var errPathNotNormal = errors.New("worker: path with encoded slashes not normal after decoding")

// NormalizePath returns the form of an escaped request path (the target's
// path as sent) that routes and rate-limit classes are matched on and that
// the proxy forwards: percent-encoded unreserved characters decoded (RFC
// 3986 §6.2.2.2), other escapes upper-cased, runs of "/" merged and dot
// segments resolved (RFC 3986 §5.2.4), a trailing "/" kept. It returns the
// escaped form and the decoded one (url.URL's Path and RawPath). A path
// whose decoded form would still change under normalisation (an encoded
// "/" next to a dot segment or another "/") is refused: an upstream that
// decodes %2F would route it elsewhere than gatehouse did.
func NormalizePath(escaped string) (raw, decoded string, err error) {
	if escaped == "" || escaped[0] != '/' {
		escaped = "/" + escaped
	}
	raw = resolveSegments(decodeUnreserved(escaped))
	if decoded, err = url.PathUnescape(raw); err != nil {
		return "", "", err
	}
	if resolveSegments(decoded) != decoded {
		return "", "", errPathNotNormal
	}
	return raw, decoded, nil
}

// decodeUnreserved decodes %XX escapes of unreserved characters and
// upper-cases the hex digits of every other escape. A malformed escape is
// left as it is for url.PathUnescape to refuse.
func decodeUnreserved(p string) string {
	if !strings.Contains(p, "%") {
		return p
	}
	var b strings.Builder
	b.Grow(len(p))
	for i := 0; i < len(p); i++ {
		if p[i] != '%' || i+2 >= len(p) || !isHex(p[i+1]) || !isHex(p[i+2]) {
			b.WriteByte(p[i])
			continue
		}
		c := unhex(p[i+1])<<4 | unhex(p[i+2])
		if isUnreserved(c) {
			b.WriteByte(c)
		} else {
			b.WriteString(strings.ToUpper(p[i : i+3]))
		}
		i += 2
	}
	return b.String()
}

// resolveSegments merges runs of "/" and resolves "." and ".." segments of
// an absolute path; ".." never climbs above "/". A path ending in "/", "/."
// or "/.." ends in "/".
func resolveSegments(p string) string {
	if normalSegments(p) {
		return p // the common case, without splitting and joining
	}
	return resolveSplit(p)
}

// normalSegments reports whether p is an absolute path that resolveSegments
// leaves as it is: no empty segment but a trailing one, no dot segment.
func normalSegments(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	for i := 1; i <= len(p); {
		end := len(p)
		if j := strings.IndexByte(p[i:], '/'); j >= 0 {
			end = i + j
		}
		switch seg := p[i:end]; {
		case seg == "." || seg == "..":
			return false
		case seg == "" && end < len(p):
			return false
		}
		i = end + 1
	}
	return true
}

// resolveSplit is resolveSegments by splitting p into its segments.
func resolveSplit(p string) string {
	segs := strings.Split(p, "/")[1:]
	out := make([]string, 0, len(segs))
	trailing := false
	for i, s := range segs {
		last := i == len(segs)-1
		switch s {
		case "", ".":
			trailing = last
		case "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
			trailing = last
		default:
			out = append(out, s)
			trailing = false
		}
	}
	r := "/" + strings.Join(out, "/")
	if trailing && len(out) > 0 {
		r += "/"
	}
	return r
}

func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}

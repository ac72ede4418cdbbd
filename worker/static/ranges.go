package static

import (
	"math"
	"slices"
	"strconv"
	"strings"
)

// partOverhead is roughly what one part of a multipart/byteranges response
// costs in boundary and header lines. Ranges closer than this are merged:
// sending the gap is cheaper than a new part (RFC 9110 §14.2).
const partOverhead = 80

// byteRange is the inclusive byte range [first, last] of a representation.
type byteRange struct{ first, last int64 }

// normalizeRange rewrites a Range header for a representation of size bytes
// into the canonical, merged and capped form http.ServeContent then answers.
// It returns "" when the header must be ignored and the whole representation
// sent (200): a range unit other than bytes (RFC 9110 §14.2: "MUST ignore"),
// or more than maxRanges ranges after merging (as nginx's max_ranges). A
// range set that is malformed or has no satisfiable range becomes one range
// starting at size, which ServeContent answers with 416 and
// "Content-Range: bytes */size", as nginx does.
func normalizeRange(header string, size int64, maxRanges int) string {
	unit, set, ok := strings.Cut(header, "=")
	if !ok || !strings.EqualFold(strings.TrimSpace(unit), "bytes") {
		return ""
	}
	ranges, ok := parseRangeSet(set, size)
	if !ok || len(ranges) == 0 {
		return "bytes=" + strconv.FormatInt(size, 10) + "-"
	}
	ranges = coalesce(ranges)
	if len(ranges) > maxRanges {
		return ""
	}
	var b strings.Builder
	b.WriteString("bytes=")
	for i, r := range ranges {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(r.first, 10))
		b.WriteByte('-')
		b.WriteString(strconv.FormatInt(r.last, 10))
	}
	return b.String()
}

// parseRangeSet parses the ranges after "bytes=" (RFC 9110 §14.1.1) and
// returns the satisfiable ones clipped to size; ok is false when the set is
// malformed (including a last-pos before its first-pos).
func parseRangeSet(set string, size int64) (ranges []byteRange, ok bool) {
	seen := false
	for spec := range strings.SplitSeq(set, ",") {
		spec = strings.Trim(spec, " \t")
		if spec == "" {
			continue // empty list elements are allowed (RFC 9110 §5.6.1)
		}
		seen = true
		first, last, dash := strings.Cut(spec, "-")
		if !dash {
			return nil, false
		}
		if first == "" {
			n, ok := digits(last)
			if !ok {
				return nil, false
			}
			if n == 0 || size == 0 {
				continue // a zero-length suffix is unsatisfiable
			}
			ranges = append(ranges, byteRange{max(0, size-n), size - 1})
			continue
		}
		start, ok := digits(first)
		if !ok {
			return nil, false
		}
		end := int64(math.MaxInt64)
		if last != "" {
			if end, ok = digits(last); !ok || end < start {
				return nil, false
			}
		}
		if start >= size {
			continue
		}
		ranges = append(ranges, byteRange{start, min(end, size-1)})
	}
	return ranges, seen
}

// digits parses a non-empty run of ASCII digits, saturating at MaxInt64.
func digits(s string) (int64, bool) {
	if s == "" {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		if n > (math.MaxInt64-9)/10 {
			n = math.MaxInt64
			continue
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// coalesce sorts ranges and merges those that overlap, touch, or lie closer
// than partOverhead, so the response never repeats a byte and many tiny
// ranges cannot multiply its size.
func coalesce(ranges []byteRange) []byteRange {
	slices.SortFunc(ranges, func(a, b byteRange) int {
		switch {
		case a.first < b.first:
			return -1
		case a.first > b.first:
			return 1
		}
		return 0
	})
	out := ranges[:1]
	for _, r := range ranges[1:] {
		cur := &out[len(out)-1]
		if r.first-cur.last <= partOverhead {
			cur.last = max(cur.last, r.last)
			continue
		}
		out = append(out, r)
	}
	return out
}

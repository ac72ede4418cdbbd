package static

import "strings"

// codings are the precompressed siblings looked for, in order of preference
// when the client weighs them equally.
var codings = []struct {
	name, suffix string
}{
	{"br", ".br"},
	{"gzip", ".gz"},
}

// acceptQuality returns the weight (0..1000) Accept-Encoding gives coding
// (RFC 9110 §12.5.3): its own entry, else "*", else 0. "x-gzip" counts as
// gzip. A malformed weight counts as 0.
func acceptQuality(header, coding string) int {
	star := 0
	for elem := range strings.SplitSeq(header, ",") {
		name, params, _ := strings.Cut(elem, ";")
		name = strings.ToLower(strings.Trim(name, " \t"))
		if name == "x-gzip" {
			name = "gzip"
		}
		if name != coding && name != "*" {
			continue
		}
		q := 1000
		for param := range strings.SplitSeq(params, ";") {
			k, v, _ := strings.Cut(strings.Trim(param, " \t"), "=")
			if strings.EqualFold(strings.TrimSpace(k), "q") {
				q = ParseQuality(strings.TrimSpace(v))
			}
		}
		if name == coding {
			return q
		}
		star = q
	}
	return star
}

// ParseQuality parses a qvalue ("0", "0.5", "1.000") into thousandths; a
// malformed one is 0.
func ParseQuality(v string) int {
	whole, frac, _ := strings.Cut(v, ".")
	if (whole != "0" && whole != "1") || len(frac) > 3 {
		return 0
	}
	q := 0
	if whole == "1" {
		q = 1000
	}
	if frac != "" {
		n64, ok := digits(frac)
		if !ok {
			return 0
		}
		n := int(n64)
		for i := len(frac); i < 3; i++ {
			n *= 10
		}
		if whole == "1" && n != 0 {
			return 0
		}
		q += n
	}
	return q
}

package config

import (
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
)

// decoder collects every diagnostic found while turning a file into a
// Config, so that one run reports all problems rather than the first.
type decoder struct {
	diags   hcl.Diagnostics
	proxies []proxyRef // checked against the upstreams at the end
	// redirects are the https_redirects naming a listener, resolved once
	// every listener is read.
	redirects []redirectRef
	host      *hostChecks // nil: the host checks are skipped
	// auths are the basic_auth blocks, checked against the rate limit
	// classes and the Hello budget at the end.
	auths []authRef
	// pages are the error pages decoded, placed under their roots once
	// every static root is known.
	pages []pageRef
}

func (d *decoder) add(diags hcl.Diagnostics) { d.diags = append(d.diags, diags...) }

func (d *decoder) errorf(rng hcl.Range, summary, format string, args ...any) {
	d.diags = append(d.diags, &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  summary,
		Detail:   fmt.Sprintf(format, args...),
		Subject:  rng.Ptr(),
	})
}

// warnf records a problem that does not stop the file from loading.
func (d *decoder) warnf(rng hcl.Range, summary, format string, args ...any) {
	d.diags = append(d.diags, &hcl.Diagnostic{
		Severity: hcl.DiagWarning,
		Summary:  summary,
		Detail:   fmt.Sprintf(format, args...),
		Subject:  rng.Ptr(),
	})
}

// value evaluates attr's expression, which may use neither variables nor
// functions, and reports whether it yielded a usable value of type want.
// what describes want in the error ("a number").
func (d *decoder) value(attr *hcl.Attribute, name string, want cty.Type, what string) (cty.Value, bool) {
	v, diags := attr.Expr.Value(nil)
	d.add(diags)
	if diags.HasErrors() {
		return cty.NilVal, false
	}
	return d.check(v, attr.Expr.Range(), name, want, what)
}

// check reports whether v is a known, non-null value of exactly type want.
// Unlike gohcl it does not convert: "4" is not a number and 1 is not a string.
func (d *decoder) check(v cty.Value, rng hcl.Range, name string, want cty.Type, what string) (cty.Value, bool) {
	switch {
	case v.IsMarked():
		d.errorf(rng, "Invalid value", "%s must be %s.", name, what)
	case v.IsNull():
		d.errorf(rng, "Invalid value", "%s must be %s, not null.", name, what)
	case !v.IsWhollyKnown():
		d.errorf(rng, "Invalid value", "%s must be %s known when the file is read.", name, what)
	case !v.Type().Equals(want):
		d.errorf(rng, "Incorrect attribute value type", "%s must be %s, got %s.", name, what, v.Type().FriendlyName())
	default:
		return v, true
	}
	return cty.NilVal, false
}

// intAttr sets *dst to attrs[key] if it is present, a whole number and within
// lo..hi; otherwise it records an error and leaves *dst alone.
func intAttr[T int | int64](d *decoder, attrs hcl.Attributes, key, name string, lo, hi T, dst *T) {
	attr, ok := attrs[key]
	if !ok {
		return
	}
	v, ok := d.value(attr, name, cty.Number, "a whole number")
	if !ok {
		return
	}
	rng := attr.Expr.Range()
	f := v.AsBigFloat()
	if !f.IsInt() {
		d.errorf(rng, "Invalid value", "%s must be a whole number, got %s.", name, formatNumber(f))
		return
	}
	n, acc := f.Int64()
	if acc != big.Exact || n < int64(lo) || n > int64(hi) {
		d.errorf(rng, "Invalid value", "%s must be between %d and %d, got %s.", name, lo, hi, formatNumber(f))
		return
	}
	*dst = T(n)
}

func formatNumber(f *big.Float) string {
	if n, acc := f.Int64(); acc == big.Exact {
		return strconv.FormatInt(n, 10)
	}
	return f.Text('g', 10)
}

// durationAttr sets *dst to attrs[key] if it is present, a string that
// time.ParseDuration accepts and within lo..hi.
func durationAttr(d *decoder, attrs hcl.Attributes, key, name string, lo, hi time.Duration, dst *time.Duration) {
	s, rng, ok := stringAttr(d, attrs, key, name)
	if !ok {
		return
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		d.errorf(rng, "Invalid duration", "%s must be a duration such as \"5s\" or \"1m30s\", got %q.", name, s)
		return
	}
	if v < lo || v > hi {
		d.errorf(rng, "Invalid value", "%s must be between %s and %s, got %s.", name, formatDuration(lo), formatDuration(hi), formatDuration(v))
		return
	}
	*dst = v
}

// formatDuration is time.Duration.String without trailing zero units:
// "1m" rather than "1m0s".
func formatDuration(v time.Duration) string {
	s := v.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// stringAttr returns attrs[key] and its expression's range, and reports
// whether it is present and a string.
func stringAttr(d *decoder, attrs hcl.Attributes, key, name string) (string, hcl.Range, bool) {
	attr, ok := attrs[key]
	if !ok {
		return "", hcl.Range{}, false
	}
	v, ok := d.value(attr, name, cty.String, "a string")
	if !ok {
		return "", hcl.Range{}, false
	}
	return v.AsString(), attr.Expr.Range(), true
}

// boolAttr sets *dst to attrs[key] if it is present and a bool.
func boolAttr(d *decoder, attrs hcl.Attributes, key, name string, dst *bool) {
	attr, ok := attrs[key]
	if !ok {
		return
	}
	if v, ok := d.value(attr, name, cty.Bool, "true or false"); ok {
		*dst = v.True()
	}
}

// enumAttr sets *dst to attrs[key] if it is present and one of allowed.
func enumAttr(d *decoder, attrs hcl.Attributes, key, name string, allowed []string, dst *string) {
	s, rng, ok := stringAttr(d, attrs, key, name)
	if !ok {
		return
	}
	for _, a := range allowed {
		if s == a {
			*dst = s
			return
		}
	}
	quoted := make([]string, len(allowed))
	for i, a := range allowed {
		quoted[i] = strconv.Quote(a)
	}
	d.errorf(rng, "Invalid value", "%s must be one of %s, got %q.", name, strings.Join(quoted, ", "), s)
}

// stringListAttr returns the strings of attrs[key], each with the range of
// its own expression when the list is written out literally.
func stringListAttr(d *decoder, attrs hcl.Attributes, key, name string) ([]string, []hcl.Range) {
	attr, ok := attrs[key]
	if !ok {
		return nil, nil
	}
	v, diags := attr.Expr.Value(nil)
	d.add(diags)
	if diags.HasErrors() {
		return nil, nil
	}
	rng := attr.Expr.Range()
	t := v.Type()
	if v.IsNull() || !v.IsWhollyKnown() || v.IsMarked() || !(t.IsTupleType() || t.IsListType()) {
		d.check(v, rng, name, cty.List(cty.String), "a list of strings")
		return nil, nil
	}
	// Element ranges, when the expression is a literal [ ... ].
	var elems []hcl.Expression
	if exprs, diags := hcl.ExprList(attr.Expr); !diags.HasErrors() && len(exprs) == v.LengthInt() {
		elems = exprs
	}
	var ss []string
	var rngs []hcl.Range
	for i, ev := range v.AsValueSlice() {
		erng := rng
		if elems != nil {
			erng = elems[i].Range()
		}
		ev, ok := d.check(ev, erng, fmt.Sprintf("%s[%d]", name, i), cty.String, "a string")
		if !ok {
			continue
		}
		ss = append(ss, ev.AsString())
		rngs = append(rngs, erng)
	}
	return ss, rngs
}

// hasCTL reports whether s holds an ASCII control character or DEL.
func hasCTL(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f })
}

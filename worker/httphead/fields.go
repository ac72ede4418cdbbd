package httphead

import (
	"bufio"
	"bytes"
	"fmt"
)

// section says which field section is being read, to pick the error codes
// for its limits.
type section uint8

const (
	headerSection  section = iota // the request's header section
	trailerSection                // the trailer section of a chunked body
)

// fieldFunc receives one valid field line: the name as sent and the value
// with surrounding whitespace removed. Both alias a read buffer and are
// valid only during the call.
type fieldFunc func(name, value []byte) error

// readFields reads a field section (RFC 9112 §5) up to and including the
// empty line that ends it, calling fn for each field line. It returns the
// number of bytes consumed.
//
// The section may hold at most lim.MaxHeaderLines field lines of at most
// lim.MaxHeaderBytes bytes in total (CRLFs included, the final empty line
// not counted). Each line is read with a bound of what is left of that
// budget, so a section never makes readFields buffer more than the budget.
func readFields(r *bufio.Reader, lim Limits, sec section, scratch *[]byte, fn fieldFunc) (int, error) {
	tooLarge, tooMany := CodeHeaderTooLarge, CodeTooManyHeaders
	what := "request head"
	if sec == trailerSection {
		tooLarge, tooMany = CodeTrailerTooLarge, CodeTooManyTrailers
		what = "chunked trailer"
	}
	used, lines := 0, 0
	for {
		remaining := lim.MaxHeaderBytes - used
		// Always allow the two bytes of the final empty line, which the
		// budget does not count.
		line, err := readLine(r, max(remaining, 2), scratch)
		if err == errLineTooLong {
			return used, newError(tooLarge, fmt.Sprintf("field section exceeds %d bytes", lim.MaxHeaderBytes))
		}
		if err != nil {
			return used + len(line), readError(what, err)
		}
		if len(line) == 1 || len(line) == 2 && line[0] == '\r' {
			// The empty line, or a bare LF where it should be.
			if _, e := lineContent(line); e != nil {
				return used + len(line), e
			}
			return used + len(line), nil
		}
		if len(line) > remaining {
			return used, newError(tooLarge, fmt.Sprintf("field section exceeds %d bytes", lim.MaxHeaderBytes))
		}
		used += len(line)
		lines++
		if lines > lim.MaxHeaderLines {
			return used, newError(tooMany, fmt.Sprintf("more than %d field lines", lim.MaxHeaderLines))
		}
		name, value, e := parseFieldLine(line)
		if e != nil {
			return used, e
		}
		if err := fn(name, value); err != nil {
			return used, err
		}
	}
}

// parseFieldLine splits a field line (RFC 9112 §5) into name and value.
//
//	field-line = field-name ":" OWS field-value OWS
func parseFieldLine(line []byte) (name, value []byte, e *Error) {
	content, e := lineContent(line)
	if e != nil {
		return nil, nil, e
	}
	if isOWS(content[0]) {
		// RFC 9112 §5.2: obs-fold is only allowed inside message/http;
		// a server MUST reject it or replace it with SP. Rejecting also
		// covers whitespace before the first field line, which §2.2 says
		// a recipient MUST either reject or skip.
		return nil, nil, newError(CodeObsFold, "field line starts with whitespace (obs-fold)")
	}
	colon := bytes.IndexByte(content, ':')
	if colon < 0 {
		return nil, nil, newError(CodeMalformedFieldLine, fmt.Sprintf("no colon in field line %q", excerpt(content, 40)))
	}
	if colon == 0 {
		return nil, nil, newError(CodeInvalidFieldName, "empty field name")
	}
	name = content[:colon]
	if isOWS(name[len(name)-1]) {
		// RFC 9112 §5.1: a server MUST reject whitespace between the
		// field name and the colon with 400; intermediaries that strip it
		// would otherwise see a different field than we do.
		return nil, nil, newError(CodeSpaceBeforeColon, fmt.Sprintf("whitespace before colon in %q", excerpt(name, 40)))
	}
	if !isToken(name) {
		return nil, nil, newError(CodeInvalidFieldName, fmt.Sprintf("invalid field name %q", excerpt(name, 40)))
	}
	value = trimOWS(content[colon+1:])
	if !validValue(value) {
		return nil, nil, newError(CodeInvalidFieldValue, fmt.Sprintf("control byte in value of %q", excerpt(name, 40)))
	}
	return name, value, nil
}

package httphead

import "net/http"

// Code is the stable, machine-readable name of a request-parsing failure.
// Codes are part of the logging and metrics contract: they never change
// meaning once released. The table in the package documentation maps each
// code to its HTTP status.
type Code string

// Codes for failures of the request line (RFC 9112 §3).
const (
	CodeStartLineTooLong     Code = "start_line_too_long"
	CodeMalformedRequestLine Code = "malformed_request_line"
	CodeInvalidMethod        Code = "invalid_method"
	CodeInvalidTarget        Code = "invalid_target"
	CodeInvalidVersion       Code = "invalid_version"
	CodeUnsupportedVersion   Code = "unsupported_version"
	CodeConnectRefused       Code = "connect_refused"
	CodeTooManyEmptyLines    Code = "too_many_empty_lines"
	CodeBareCR               Code = "bare_cr"
	CodeBareLF               Code = "bare_lf"
	CodeNULByte              Code = "nul_byte"
	CodeHeaderTooLarge       Code = "header_too_large"
	CodeTooManyHeaders       Code = "too_many_headers"
	CodeObsFold              Code = "obs_fold"
	CodeSpaceBeforeColon     Code = "space_before_colon"
	CodeMalformedFieldLine   Code = "malformed_field_line"
	CodeInvalidFieldName     Code = "invalid_field_name"
	CodeInvalidFieldValue    Code = "invalid_field_value"
	CodeMissingHost          Code = "missing_host"
	CodeDuplicateHost        Code = "duplicate_host"
	CodeInvalidHost          Code = "invalid_host"
	CodeInvalidContentLength Code = "invalid_content_length"
	CodeConflictingLength    Code = "conflicting_content_length"
	CodeTEAndCL              Code = "te_and_cl"
	CodeTEInHTTP10           Code = "te_in_http10"
	CodeUnsupportedTransfer  Code = "unsupported_transfer_coding"
	CodeInvalidTransfer      Code = "invalid_transfer_coding"
	CodeUnsupportedExpect    Code = "unsupported_expectation"
	CodeInvalidChunk         Code = "invalid_chunk"
	CodeInvalidChunkSize     Code = "invalid_chunk_size"
	CodeInvalidChunkExt      Code = "invalid_chunk_ext"
	CodeChunkExtTooLong      Code = "chunk_ext_too_long"
	CodeChunkOverhead        Code = "excessive_chunk_overhead"
	CodeForbiddenTrailer     Code = "forbidden_trailer"
	CodeTrailerTooLarge      Code = "trailer_too_large"
	CodeTooManyTrailers      Code = "too_many_trailers"
)

// Status returns the HTTP status code a server answers a request that failed
// with c. Unknown codes map to 400.
func (c Code) Status() int {
	switch c {
	case CodeStartLineTooLong:
		// RFC 9110 §15.5.15: the target is longer than the server will
		// interpret. The start line is mostly the target, so 414 tells a
		// client what to shorten.
		return http.StatusRequestURITooLong
	case CodeHeaderTooLarge, CodeTooManyHeaders, CodeTrailerTooLarge, CodeTooManyTrailers:
		// RFC 6585 §5.
		return http.StatusRequestHeaderFieldsTooLarge
	case CodeUnsupportedVersion:
		// RFC 9110 §15.6.6.
		return http.StatusHTTPVersionNotSupported
	case CodeUnsupportedTransfer, CodeConnectRefused:
		// RFC 9112 §6.1: a server that receives a transfer coding it does
		// not understand SHOULD respond with 501. CONNECT is a method we
		// do not implement (RFC 9110 §15.6.2).
		return http.StatusNotImplemented
	case CodeUnsupportedExpect:
		// RFC 9110 §10.1.1.
		return http.StatusExpectationFailed
	}
	return http.StatusBadRequest
}

// Error is a request that gatehouse refuses. Every field is immutable once
// the error is returned. A server answers with Status and closes the
// connection: after any of these errors the position of the next request in
// the byte stream is unknown.
type Error struct {
	// Code names the failure; it is stable and safe to log and count.
	Code Code
	// Status is Code.Status(), the HTTP status to answer with.
	Status int
	// Detail is a short human-readable explanation for logs. It may quote
	// a few bytes of the request (escaped with %q) and is not meant to be
	// sent to the client.
	Detail string
}

// Error implements error.
func (e *Error) Error() string {
	if e.Detail == "" {
		return "httphead: " + string(e.Code)
	}
	return "httphead: " + string(e.Code) + ": " + e.Detail
}

// newError returns an *Error for code with its status filled in.
func newError(code Code, detail string) *Error {
	return &Error{Code: code, Status: code.Status(), Detail: detail}
}

// excerpt returns at most n bytes of b, for quoting in an Error's Detail.
func excerpt(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

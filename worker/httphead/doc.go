// Package httphead reads and validates HTTP/1.1 request heads and decodes
// chunked request bodies for the gatehouse worker.
//
// It is deliberately strict: gatehouse sits in front of applications whose
// own parsers may disagree with it, and every leniency in a front end is a
// place where the two can see different requests in the same bytes
// (request smuggling, RFC 9112 §11.2). When RFC 9112 lets a recipient
// either accept or reject something, this package rejects it.
//
// Scope: request heads (ReadHead), chunked request bodies
// (NewChunkedReader), response-header validation (ValidFieldName,
// ValidFieldValue), the Origin of an unparsable head (OriginFromRaw) and
// the normal form of a request path that routes match (NormalizePath).
// Non-goals: responses, HTTP/2, deadlines and body size caps. The parser
// is pure; it only reads from the *bufio.Reader it is given, and the caller
// bounds time by setting read deadlines on the connection underneath.
//
// # Errors and statuses
//
// A refused request yields an *Error with a stable Code and the Status to
// answer with. After any of them the server answers and closes the
// connection.
//
//	Code                         Status  Cause
//	start_line_too_long          414     request line over MaxStartLine (default 8192, CRLF included)
//	too_many_empty_lines         400     more than 4 empty lines before the request line
//	malformed_request_line       400     not exactly method SP target SP version CRLF (extra SP, HTAB, missing part)
//	invalid_method               400     method is not a token (RFC 9110 §9.1), or has no SP within
//	                                     MaxStartLine (a method that long gets 400, not 414)
//	invalid_version              400     version is not HTTP/DIGIT.DIGIT (e.g. "HTTP/1", "http/1.1")
//	unsupported_version          505     well-formed version whose major is not 1 (HTTP/0.9, HTTP/2.0);
//	                                     HTTP/1.2 and higher minors are served as HTTP/1.1 (RFC 9110 §2.5)
//	connect_refused              501     CONNECT (gatehouse is not a forward proxy)
//	invalid_target               400     a byte RFC 3986 does not allow (controls, SP-like bytes,
//	                                     '"' '<' '>' '\\' '^' '`' '{' '|' '}', >= 0x80), '[' or ']' in
//	                                     origin-form, fragment, "*" without OPTIONS, authority-form,
//	                                     scheme other than http(s), userinfo, bad escape
//	bare_lf                      400     line ended by LF without CR (RFC 9112 §2.2 permits accepting; we do not)
//	bare_cr                      400     CR not followed by LF (refused as soon as the byte after it arrives)
//	nul_byte                     400     NUL anywhere in the head (refused as soon as it arrives)
//	header_too_large             431     field lines over MaxHeaderBytes (default 32768, CRLFs included)
//	too_many_headers             431     more than MaxHeaderLines field lines (default 100)
//	obs_fold                     400     field line starting with SP or HTAB
//	malformed_field_line         400     field line without a colon
//	space_before_colon           400     whitespace between field name and colon
//	invalid_field_name           400     empty name or a byte that is not tchar
//	invalid_field_value          400     control byte other than HTAB, or DEL, in a value
//	missing_host                 400     HTTP/1.1 request without Host
//	duplicate_host               400     more than one Host field line
//	invalid_host                 400     Host value not uri-host [":" port]: bytes outside the host's
//	                                     set, a port that is not digits, brackets not around the host,
//	                                     an empty host (RFC 9110 §4.2.1)
//	invalid_content_length       400     element not 1*DIGIT (sign, space, hex, empty) or over 2^63-1
//	conflicting_content_length   400     Content-Length elements or lines with different values
//	te_in_http10                 400     Transfer-Encoding in an HTTP/1.0 request
//	te_and_cl                    400     Transfer-Encoding together with Content-Length
//	invalid_transfer_coding      400     Transfer-Encoding whose final coding is not chunked (RFC 9112 §6.3)
//	unsupported_transfer_coding  501     chunked final but preceded by another coding, or repeated
//	unsupported_expectation      417     Expect element other than 100-continue
//
// The chunked decoder adds:
//
//	invalid_chunk_size           400     chunk-size not 1-16 hex digits, over 2^63-1, or junk after it
//	invalid_chunk_ext            400     chunk extension not token [= token / quoted-string]
//	chunk_ext_too_long           400     chunk-size line over 4096 bytes
//	excessive_chunk_overhead     400     framing bytes outweigh data by more than 16 KiB
//	invalid_chunk                400     chunk data not followed by CRLF
//	forbidden_trailer            400     Content-Length, Transfer-Encoding, Host, Trailer or Connection trailer
//	trailer_too_large            431     trailer section over MaxHeaderBytes
//	too_many_trailers            431     more than MaxHeaderLines trailer lines
//
// bare_lf, bare_cr, nul_byte and the field-line codes apply to chunk-size
// lines and trailers too.
//
// End of input is not an *Error: io.EOF before a request line starts (the
// caller closes quietly), io.ErrUnexpectedEOF inside a head or body. Other
// read errors are wrapped with %w.
//
// # Leniencies kept
//
// Up to four empty lines before the request line are skipped (RFC 9112 §2.2).
// Identical Content-Length values, repeated in one field or several, are
// accepted as one (RFC 9110 §8.6); values are compared as numbers.
// HTTP/1.2 to HTTP/1.9 are read as HTTP/1.1 (RFC 9110 §2.5): Proto says
// "HTTP/1.1".
//
// # Differences from net/http
//
// FuzzBodyBoundary checks that whenever this package accepts a request,
// net/http's ReadRequest accepts it too and finds the body ending at the
// same byte. The cases where this package accepts and net/http refuses are
// listed, with reasons, in knownDifference in fuzz_test.go: leading empty
// lines, a Content-Length list of identical values, duplicate
// Content-Length values equal as numbers but not as strings ("5", "05"),
// and a Trailer field announcing a framing field. None moves the body's
// end.
package httphead

package httphead

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"net/http"
)

// chunkState is where a chunkedReader is in the body:
//
//	        ┌──────────────────────────────┐
//	        v                              │
//	chunkSize ──size>0──> chunkData ──> chunkDataEnd
//	    │
//	    └──size=0──> (trailer section) ──> chunkDone (io.EOF)
//
// Any error is sticky and ends the body.
type chunkState uint8

const (
	chunkSize    chunkState = iota // expecting a chunk-size line
	chunkData                      // inside chunk-data, n bytes left
	chunkDataEnd                   // expecting the CRLF after chunk-data
	chunkDone                      // last-chunk and trailers consumed
)

// chunkedReader decodes a chunked body (RFC 9112 §7.1). It is not safe for
// concurrent use.
type chunkedReader struct {
	r       *bufio.Reader
	lim     Limits
	state   chunkState
	n       uint64 // data bytes left in the current chunk
	excess  int64  // non-data bytes beyond the allowance; see maxChunkOverhead
	err     error  // sticky; io.EOF after the final CRLF
	scratch []byte // line accumulation for readLine
}

// NewChunkedReader returns a reader of the chunked body that follows a head
// in r. It decodes strictly:
//
//   - chunk-size is 1 to 16 hex digits, at most math.MaxInt64, with no
//     sign, "0x" prefix or whitespace;
//   - chunk extensions are ";" token ["=" (token / quoted-string)] with no
//     whitespace (RFC 9112 §7.1.1 allows BWS; we refuse it), and a
//     chunk-size line is at most 4096 bytes;
//   - the data of each chunk is followed by exactly CRLF;
//   - the trailer section is read under lim's MaxHeaderBytes and
//     MaxHeaderLines with the header section's field-line rules, must not
//     carry Content-Length, Transfer-Encoding, Host, Trailer or
//     Connection, and is discarded;
//   - chunk-size lines and extensions may not outweigh the data by more
//     than 16 KiB (the rule net/http applies).
//
// Malformed input yields an *Error with Status 400 (431 for trailers over
// the limits); an early end of input io.ErrUnexpectedEOF; other read errors
// are wrapped with %w. After the final CRLF Read returns io.EOF, and r is
// positioned exactly after the body: nothing is read from r beyond it, so
// a pipelined request stays in r.
//
// The caller still bounds the decoded size (max_body_bytes).
func NewChunkedReader(r *bufio.Reader, lim Limits) io.Reader {
	return &chunkedReader{r: r, lim: lim.withDefaults()}
}

// Read implements io.Reader.
func (cr *chunkedReader) Read(p []byte) (int, error) {
	if cr.err != nil {
		return 0, cr.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	for {
		switch cr.state {
		case chunkSize:
			if err := cr.readChunkHeader(); err != nil {
				cr.err = err
				return 0, err
			}
		case chunkData:
			if uint64(len(p)) > cr.n {
				p = p[:cr.n]
			}
			// bufio.Reader.Read reads at most len(p) bytes, so nothing
			// past this chunk's data is taken from the connection.
			n, err := cr.r.Read(p)
			cr.n -= uint64(n)
			if cr.n == 0 {
				cr.state = chunkDataEnd
			}
			if n > 0 || err == nil {
				return n, nil
			}
			cr.err = readError("chunked body", err)
			return 0, cr.err
		case chunkDataEnd:
			if err := cr.readDataEnd(); err != nil {
				cr.err = err
				return 0, err
			}
			cr.state = chunkSize
		case chunkDone:
			cr.err = io.EOF
			return 0, io.EOF
		}
	}
}

// readDataEnd consumes the CRLF that must follow chunk-data.
func (cr *chunkedReader) readDataEnd() error {
	for _, want := range [2]byte{'\r', '\n'} {
		c, err := cr.r.ReadByte()
		if err != nil {
			return readError("chunked body", err)
		}
		if c != want {
			return newError(CodeInvalidChunk, "chunk data not followed by CRLF")
		}
	}
	return nil
}

// readChunkHeader reads a chunk-size line (RFC 9112 §7.1):
//
//	chunk          = chunk-size [ chunk-ext ] CRLF chunk-data CRLF
//	last-chunk     = 1*("0") [ chunk-ext ] CRLF
//	chunk-size     = 1*HEXDIG
//
// and, for the last chunk, the trailer section and final CRLF.
func (cr *chunkedReader) readChunkHeader() error {
	line, err := readLine(cr.r, maxChunkLine, &cr.scratch)
	if err == errLineTooLong {
		if hexPrefix(line) > maxChunkSizeDigits {
			return newError(CodeInvalidChunkSize, "chunk-size has more than 16 hex digits")
		}
		return newError(CodeChunkExtTooLong, fmt.Sprintf("chunk-size line longer than %d bytes", maxChunkLine))
	}
	if err != nil {
		return readError("chunked body", err)
	}
	content, e := lineContent(line)
	if e != nil {
		return e
	}
	digits := hexPrefix(content)
	if digits == 0 {
		return newError(CodeInvalidChunkSize, fmt.Sprintf("chunk-size line %q does not start with a hex digit", excerpt(content, 20)))
	}
	if digits > maxChunkSizeDigits {
		return newError(CodeInvalidChunkSize, "chunk-size has more than 16 hex digits")
	}
	var size uint64
	for _, c := range content[:digits] {
		size = size<<4 | uint64(unhex(c))
	}
	if size > math.MaxInt64 {
		return newError(CodeInvalidChunkSize, "chunk-size exceeds 2^63-1")
	}
	if e := checkChunkExt(content[digits:]); e != nil {
		return e
	}

	// Same accounting as net/http's chunkedReader: every chunk may carry
	// 16 bytes of framing plus two bytes per data byte for free.
	cr.excess += int64(len(content)) + 2
	credit := int64(math.MaxInt64)
	if size < (math.MaxInt64-16)/2 {
		credit = 16 + 2*int64(size)
	}
	cr.excess = max(cr.excess-credit, 0)
	if cr.excess > maxChunkOverhead {
		return newError(CodeChunkOverhead, "chunk framing outweighs the data")
	}

	if size > 0 {
		cr.n = size
		cr.state = chunkData
		return nil
	}
	// last-chunk: the trailer section follows (RFC 9112 §7.1.2).
	if _, err := readFields(cr.r, cr.lim, trailerSection, &cr.scratch, checkTrailer); err != nil {
		return err
	}
	cr.state = chunkDone
	return nil
}

// checkTrailer refuses trailer fields that would change framing, routing
// or connection handling if an implementation merged trailers into the
// header section (RFC 9110 §6.5.1). Trailers are otherwise discarded.
func checkTrailer(name, _ []byte) error {
	switch {
	case asciiEqualFold(name, "content-length"),
		asciiEqualFold(name, "transfer-encoding"),
		asciiEqualFold(name, "host"),
		asciiEqualFold(name, "trailer"),
		asciiEqualFold(name, "connection"):
		return newError(CodeForbiddenTrailer, fmt.Sprintf("%s in trailer section", http.CanonicalHeaderKey(string(name))))
	}
	return nil
}

// checkChunkExt validates the chunk extensions after the chunk-size. RFC
// 9112 §7.1.1:
//
//	chunk-ext      = *( BWS ";" BWS chunk-ext-name
//	                    [ BWS "=" BWS chunk-ext-val ] )
//	chunk-ext-name = token
//	chunk-ext-val  = token / quoted-string
//
// BWS is refused: whitespace there is how "1 ;x" and "1\t" smuggling
// probes hide a second chunk-size interpretation.
func checkChunkExt(ext []byte) *Error {
	for first := true; len(ext) > 0; first = false {
		if ext[0] != ';' {
			if first {
				return newError(CodeInvalidChunkSize, fmt.Sprintf("unexpected byte %q after chunk-size", ext[0]))
			}
			return newError(CodeInvalidChunkExt, fmt.Sprintf("unexpected byte %q in chunk extension", ext[0]))
		}
		ext = ext[1:]
		n := tokenPrefix(ext)
		if n == 0 {
			return newError(CodeInvalidChunkExt, "chunk extension without a name")
		}
		ext = ext[n:]
		if len(ext) == 0 || ext[0] != '=' {
			continue
		}
		ext = ext[1:]
		if len(ext) > 0 && ext[0] == '"' {
			n = quotedStringLen(ext)
		} else {
			n = tokenPrefix(ext)
		}
		if n == 0 {
			return newError(CodeInvalidChunkExt, "invalid chunk extension value")
		}
		ext = ext[n:]
	}
	return nil
}

// quotedStringLen returns the length of the quoted-string (RFC 9110
// §5.6.4) at the start of b, or 0 if there is none.
//
//	quoted-string = DQUOTE *( qdtext / quoted-pair ) DQUOTE
//	quoted-pair   = "\" ( HTAB / SP / VCHAR / obs-text )
func quotedStringLen(b []byte) int {
	for i := 1; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c == '\\':
			i++
			if i == len(b) || byteClass[b[i]]&classFieldChar == 0 {
				return 0
			}
		case byteClass[c]&classQdtext == 0:
			return 0
		}
	}
	return 0
}

// tokenPrefix returns the number of tchar bytes at the start of b.
func tokenPrefix(b []byte) int {
	i := 0
	for i < len(b) && isTchar(b[i]) {
		i++
	}
	return i
}

// hexPrefix returns the number of HEXDIG bytes at the start of b.
func hexPrefix(b []byte) int {
	i := 0
	for i < len(b) && isHex(b[i]) {
		i++
	}
	return i
}

// unhex returns the value of the hex digit c.
func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c >= 'a':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

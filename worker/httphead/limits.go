package httphead

// Default limits, applied when a Limits field is zero. They are the fixed
// limits of docs/DESIGN.md §3.1.
const (
	DefaultMaxStartLine   = 8192
	DefaultMaxHeaderBytes = 32768
	DefaultMaxHeaderLines = 100
)

// Fixed bounds that are not configurable.
const (
	// maxLeadingEmptyLines is how many empty lines (CRLF) ReadHead skips
	// before the request line. RFC 9112 §2.2 says a server SHOULD ignore
	// at least one, for clients that send an extra CRLF after a body;
	// more than a few is noise, and the bound keeps the skip loop finite.
	maxLeadingEmptyLines = 4

	// maxChunkLine bounds a chunk-size line, CRLF included: at most 16
	// hex digits and the chunk extensions (RFC 9112 §7.1.1), so an
	// extension list is always shorter than 4096 bytes. net/http uses the
	// same bound.
	maxChunkLine = 4096

	// maxChunkSizeDigits is the most hex digits a chunk-size may have; 16
	// digits fill a uint64, and sizes beyond math.MaxInt64 are refused.
	maxChunkSizeDigits = 16

	// maxChunkOverhead bounds non-data bytes in a chunked body beyond a
	// fixed allowance per chunk and per data byte, so a client cannot
	// keep a worker reading chunk extensions forever while the body size
	// cap, which counts data bytes only, never fires. The rule is the
	// one net/http applies.
	maxChunkOverhead = 16 << 10

	// maxOriginLen bounds the value OriginFromRaw returns: a serialized
	// origin is a scheme, a host of at most 253 bytes and a port.
	maxOriginLen = 320
)

// Limits bounds a request head. Zero (or negative) fields mean the
// defaults. Limits is a plain value: ReadHead fills defaults in its own
// copy and never writes to the caller's.
type Limits struct {
	// MaxStartLine bounds the request line in bytes, CRLF included.
	// Longer lines fail with CodeStartLineTooLong (414).
	MaxStartLine int
	// MaxHeaderBytes bounds the header section in bytes: every field line
	// with its CRLF, not counting the start line or the empty line that
	// ends the section. Larger sections fail with CodeHeaderTooLarge
	// (431). The trailer section of a chunked body has the same bound.
	MaxHeaderBytes int
	// MaxHeaderLines bounds the number of field lines. More fail with
	// CodeTooManyHeaders (431).
	MaxHeaderLines int
}

// withDefaults returns a copy of l with zero fields set to the defaults.
func (l Limits) withDefaults() Limits {
	if l.MaxStartLine <= 0 {
		l.MaxStartLine = DefaultMaxStartLine
	}
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if l.MaxHeaderLines <= 0 {
		l.MaxHeaderLines = DefaultMaxHeaderLines
	}
	return l
}

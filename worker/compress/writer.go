package compress

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"sync"
)

// compressOutBuf is the encoder output gathered before it goes to the
// response: encoders write in pieces of a few hundred bytes, and each write
// to a chunked response is a chunk.
const compressOutBuf = 8 << 10

// copyBufPool holds the buffers ReadFrom reads a file through when its
// bytes are compressed (sendfile cannot compress).
var copyBufPool = sync.Pool{New: func() any { return new([32 << 10]byte) }}

// compressState is where a Writer is in its response:
//
//	cwNew ── WriteHeader, not compressible or identity chosen ──▶ cwPass
//	  │  ╰── a coding chosen, length known (or HEAD) ──▶ cwEncode (cwHead)
//	  ╰── a coding chosen, length unknown ──▶ cwHolding
//	cwHolding ── min_length reached, or Flush ──▶ cwEncode
//	cwHolding ── handler returned under min_length ──▶ cwPass
type compressState uint8

const (
	cwNew compressState = iota
	cwPass
	cwHolding
	cwEncode
	cwHead
)

// Writer is the http.ResponseWriter a handler on a compressing
// route writes to. It decides at WriteHeader, from the status, the header
// and the request, whether the body is compressed and with which coding;
// a body it does not compress goes to the response untouched (a file body
// still by sendfile). The worker keeps one per server goroutine, reused round after round; owned
// by the round's goroutine.
type Writer struct {
	rw     http.ResponseWriter // the round's response
	req    *http.Request
	c      *Policy
	state  compressState
	status int
	coding int     // index in c.codings, once chosen
	enc    encoder // from c.pools[coding] while cwEncode
	// held is a body of unknown length while it is under min_length; its
	// capacity (at most min_length, 64 KiB) is kept for the next round.
	held []byte
	out  *bufio.Writer // gathers the encoder's output for rw
	err  error         // sticky encoder error
}

// Start readies cw for a round whose handler writes to rw under c.
func (cw *Writer) Start(rw http.ResponseWriter, req *http.Request, c *Policy) *Writer {
	if cw.out == nil {
		cw.out = bufio.NewWriterSize(rw, compressOutBuf)
	}
	cw.out.Reset(rw)
	cw.rw, cw.req, cw.c = rw, req, c
	cw.state, cw.status, cw.coding, cw.err = cwNew, 0, 0, nil
	cw.held = cw.held[:0]
	return cw
}

// Header is the response's header.
func (cw *Writer) Header() http.Header { return cw.rw.Header() }

// WriteHeader decides, for a final status, whether and how the body is
// compressed; the header is sent now, or once a body of unknown length
// reaches min_length.
func (cw *Writer) WriteHeader(code int) {
	switch {
	case cw.state == cwHolding:
		// The status is decided, not yet sent: a second one is
		// superfluous, as the response would say once it was sent.
		return
	case cw.state != cwNew || code < 200:
		// A second WriteHeader is the response's to warn about; a 1xx
		// passes and the final status is still to come.
		cw.rw.WriteHeader(code)
		return
	}
	cw.status = code
	h := cw.rw.Header()
	if code == http.StatusNotModified {
		cw.notModified(h)
	}
	if !cw.c.compressible(code, h, cw.req) {
		cw.pass()
		return
	}
	idx, ok := cw.c.negotiate(cw.req.Header["Accept-Encoding"])
	_, known := contentLength(h)
	switch {
	case !ok:
		addVary(h)
		cw.pass()
	case known || cw.req.Method == http.MethodHead:
		cw.coding = idx
		cw.encode()
	default:
		// The length shows once min_length bytes are written, or the
		// handler flushes (a stream) or returns (a short body).
		cw.coding = idx
		cw.state = cwHolding
	}
}

// notModified answers a 304 with the validator the client holds: the weak
// ETag a compressed 200 carried, when If-None-Match names it.
func (cw *Writer) notModified(h http.Header) {
	et := h.Get("Etag")
	if !strings.HasPrefix(et, `"`) {
		return
	}
	for _, v := range cw.req.Header["If-None-Match"] {
		for tag := range strings.SplitSeq(v, ",") {
			if t := strings.TrimSpace(tag); len(t) == len(et)+2 && t[:2] == "W/" && t[2:] == et {
				weakenETag(h)
				addVary(h)
				return
			}
		}
	}
}

// pass sends the header as the handler left it; the body follows as it is.
func (cw *Writer) pass() {
	cw.state = cwPass
	cw.rw.WriteHeader(cw.status)
}

// encode commits the header of a compressed response and takes an encoder.
func (cw *Writer) encode() {
	h := cw.rw.Header()
	addVary(h)
	h.Set("Content-Encoding", codingNames[cw.c.codings[cw.coding]])
	h.Del("Content-Length")
	// Ranges are of the identity representation, served only uncompressed.
	h.Del("Accept-Ranges")
	weakenETag(h)
	cw.rw.WriteHeader(cw.status)
	if cw.req.Method == http.MethodHead {
		cw.state = cwHead
		return
	}
	cw.enc = cw.c.pools[cw.coding].Get().(encoder)
	cw.enc.Reset(cw.out)
	cw.state = cwEncode
}

// Write compresses p, holds it, or passes it on, as WriteHeader decided.
func (cw *Writer) Write(p []byte) (int, error) {
	if cw.state == cwNew {
		// As net/http's: a body written without a type gets one sniffed
		// from its start (a handler that set a nil type wants none).
		if _, set := cw.rw.Header()["Content-Type"]; !set && len(p) > 0 {
			cw.rw.Header().Set("Content-Type", http.DetectContentType(p))
		}
		cw.WriteHeader(http.StatusOK)
	}
	switch cw.state {
	case cwPass:
		return cw.rw.Write(p)
	case cwHead:
		return len(p), nil
	case cwHolding:
		if int64(len(cw.held)+len(p)) < cw.c.minLength {
			cw.held = append(cw.held, p...)
			return len(p), nil
		}
		if err := cw.stopHolding(); err != nil {
			return 0, err
		}
	}
	if cw.err != nil {
		return 0, cw.err
	}
	n, err := cw.enc.Write(p)
	cw.err = err
	return n, err
}

// stopHolding ends cwHolding: the body is compressed from here on, what was
// held first.
func (cw *Writer) stopHolding() error {
	cw.encode()
	if len(cw.held) > 0 {
		_, cw.err = cw.enc.Write(cw.held)
		cw.held = cw.held[:0]
	}
	return cw.err
}

// ReadFrom sends a file body by the response's ReadFrom (sendfile) when it
// is not compressed, and through the encoder when it is.
func (cw *Writer) ReadFrom(src io.Reader) (int64, error) {
	if cw.state == cwNew {
		cw.WriteHeader(http.StatusOK)
	}
	if cw.state == cwPass {
		if rf, ok := cw.rw.(io.ReaderFrom); ok {
			return rf.ReadFrom(src)
		}
		return io.Copy(writerOnly{cw.rw}, src)
	}
	buf := copyBufPool.Get().(*[32 << 10]byte)
	defer copyBufPool.Put(buf)
	var total int64
	for {
		n, err := src.Read(buf[:])
		if n > 0 {
			if _, werr := cw.Write(buf[:n]); werr != nil {
				return total, werr
			}
			total += int64(n)
		}
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// Flush sends everything written so far: a stream's event reaches the
// client compressed as soon as its upstream flushed it.
func (cw *Writer) Flush() {
	if cw.state == cwNew {
		cw.WriteHeader(http.StatusOK)
	}
	if cw.state == cwHolding {
		cw.stopHolding()
	}
	if cw.state == cwEncode && cw.err == nil {
		if cw.err = cw.enc.Flush(); cw.err == nil {
			cw.err = cw.out.Flush()
		}
	}
	if f, ok := cw.rw.(http.Flusher); ok {
		f.Flush()
	}
}

// Finish completes the body after the handler returned: a held body goes
// out as it is, an encoded one gets its end. The response's own finish
// follows.
func (cw *Writer) Finish() error {
	switch cw.state {
	case cwHolding:
		// Under min_length: not worth compressing, and so not varying.
		cw.pass()
		_, err := cw.rw.Write(cw.held)
		return err
	case cwEncode:
		if cw.err == nil {
			if cw.err = cw.enc.Close(); cw.err == nil {
				cw.err = cw.out.Flush()
			}
		}
		return cw.err
	}
	return nil
}

// End returns the encoder to its pool and drops the round's references,
// whether or not the handler completed.
func (cw *Writer) End() {
	if cw.enc != nil {
		cw.enc.Reset(io.Discard)
		cw.c.pools[cw.coding].Put(cw.enc)
		cw.enc = nil
	}
	if cw.out != nil {
		cw.out.Reset(nil)
	}
	cw.rw, cw.req, cw.c = nil, nil, nil
	cw.held = cw.held[:0]
}

// writerOnly hides a ResponseWriter's ReadFrom from io.Copy.
type writerOnly struct{ io.Writer }

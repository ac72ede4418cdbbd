// Package compress is a route's response compression: the negotiation of
// Accept-Encoding, the worker's encoder pools, and the ResponseWriter that
// compresses a handler's body when its status, header and request allow.
package compress

import (
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/gatehouse-dev/gatehouse/worker/static"
)

// Encoder memory bounds. A worker has no memory rlimit (sandbox/: core,
// file size and descriptors only), so what bounds it is concurrency ×
// one encoder each; these keep an encoder near 1 MB (gzip), 2.2 MB (zstd)
// and 2.8 MB (brotli quality 4) once warm, 8 MB for the three at once.
const (
	// zstdWindow is the zstd window (the encoder's default is 8 MB): a
	// 256 KB window costs about 1 % of ratio on web text and bounds what
	// a client's decoder must hold too.
	zstdWindow = 256 << 10
	// brotliWindow is brotli's lgwin (2^18, 256 KB; the library's default
	// 22 is 4 MB).
	brotliWindow = 18
)

// coding is a content coding the worker produces.
type coding uint8

const (
	codingZstd coding = iota
	codingBrotli
	codingGzip
	codingCount
)

// codingNames are the tokens of Accept-Encoding and Content-Encoding.
var codingNames = [codingCount]string{codingZstd: "zstd", codingBrotli: "br", codingGzip: "gzip"}

// encoder is a compressor that can be reused after Close by Reset; the
// three libraries' writers all are.
type encoder interface {
	io.WriteCloser
	Flush() error
	Reset(io.Writer)
}

// Policy is a route's compress block made ready to serve; immutable.
type Policy struct {
	codings   []coding     // offered, the server's preference first
	pools     []*sync.Pool // of encoders, one per entry of codings
	types     []string     // "a/b" exact, or "a/" for "a/*"
	minLength int64
}

// encoderKey names a pool of encoders: a coding at a level.
type encoderKey struct {
	c     coding
	level int
}

// Pools are a worker's encoder pools, shared by the routes that use
// the same coding and level. Built with the router, then read-only.
type Pools map[encoderKey]*sync.Pool

// New returns a route's Policy, its pools taken from (and added to) pools.
func New(cfg *config.Compress, pools Pools) *Policy {
	c := &Policy{minLength: int64(cfg.MinLength)}
	for _, t := range cfg.Types {
		c.types = append(c.types, strings.TrimSuffix(t, "*"))
	}
	for _, name := range cfg.Encodings {
		var k encoderKey
		switch name {
		case "zstd":
			k = encoderKey{codingZstd, cfg.ZstdLevel}
		case "br":
			k = encoderKey{codingBrotli, cfg.BrotliLevel}
		default:
			k = encoderKey{codingGzip, cfg.GzipLevel}
		}
		p := pools[k]
		if p == nil {
			p = &sync.Pool{New: func() any { return newEncoder(k) }}
			pools[k] = p
		}
		c.codings = append(c.codings, k.c)
		c.pools = append(c.pools, p)
	}
	return c
}

// newEncoder returns an encoder for k, writing nowhere until Reset. The
// levels were checked by the configuration, so the constructors cannot fail.
func newEncoder(k encoderKey) encoder {
	switch k.c {
	case codingZstd:
		e, err := zstd.NewWriter(nil,
			zstd.WithEncoderLevel(zstd.EncoderLevelFromZstd(k.level)),
			zstd.WithWindowSize(zstdWindow),
			// One goroutine, the round's: encoding is synchronous, and
			// a worker's concurrency bounds the encoders at work.
			zstd.WithEncoderConcurrency(1),
			zstd.WithLowerEncoderMem(true))
		if err != nil {
			panic("compress: zstd encoder: " + err.Error())
		}
		return e
	case codingBrotli:
		return brotli.NewWriterOptions(nil, brotli.WriterOptions{Quality: k.level, LGWin: brotliWindow})
	}
	e, err := gzip.NewWriterLevel(nil, k.level)
	if err != nil {
		panic("compress: gzip encoder: " + err.Error())
	}
	return e
}

// negotiate returns the index in c.codings of the coding to answer with
// (RFC 9110 §12.5.3): the one the client weighs highest, the server's order
// breaking ties, provided it weighs it above 0 and no less than identity
// when identity is weighed (by name or by "*").
// ok is false for identity: no Accept-Encoding, nothing acceptable, or
// identity preferred.
func (c *Policy) negotiate(accept []string) (idx int, ok bool) {
	if len(accept) == 0 {
		return 0, false
	}
	var q [codingCount]int
	for i := range q {
		q[i] = -1 // not named
	}
	star, identity := -1, -1
	for _, v := range accept {
		for elem := range strings.SplitSeq(v, ",") {
			name, params, _ := strings.Cut(elem, ";")
			name = strings.Trim(name, " \t")
			w := 1000
			for param := range strings.SplitSeq(params, ";") {
				k, val, _ := strings.Cut(strings.Trim(param, " \t"), "=")
				if strings.EqualFold(strings.TrimSpace(k), "q") {
					w = static.ParseQuality(strings.TrimSpace(val))
				}
			}
			switch {
			case name == "*":
				star = w
			case strings.EqualFold(name, "identity"):
				identity = w
			case strings.EqualFold(name, "gzip"), strings.EqualFold(name, "x-gzip"):
				q[codingGzip] = w
			case strings.EqualFold(name, "br"):
				q[codingBrotli] = w
			case strings.EqualFold(name, "zstd"):
				q[codingZstd] = w
			}
		}
	}
	if identity < 0 {
		// Not named: acceptable, and below any coding the client names
		// (nginx's and Caddy's reading), unless "*" weighs it.
		identity = max(star, 0)
	}
	best, bestQ := -1, 0
	for i, cd := range c.codings {
		w := q[cd]
		if w < 0 {
			w = max(star, 0)
		}
		if w > bestQ {
			best, bestQ = i, w
		}
	}
	if best < 0 || bestQ < identity {
		return 0, false
	}
	return best, true
}

// compressible reports whether a response of this status and header may be
// compressed for req: a final status other than 204, 206 and 304, no Range
// asked, no Content-Encoding already, no no-transform either way, a listed
// type, and no Content-Length under the minimum.
func (c *Policy) compressible(status int, h http.Header, req *http.Request) bool {
	switch {
	case status < 200, status == http.StatusNoContent, status == http.StatusPartialContent, status == http.StatusNotModified:
		return false
	case req.Header.Get("Range") != "":
		// A range is of the identity representation (nginx's gzip would
		// answer the whole body compressed instead).
		return false
	case h.Get("Content-Encoding") != "":
		return false
	case hasToken(h["Cache-Control"], "no-transform"), hasToken(req.Header["Cache-Control"], "no-transform"):
		// RFC 9111 §5.2.1.6, §5.2.2.6.
		return false
	case !c.typeListed(h.Get("Content-Type")):
		return false
	}
	if n, known := contentLength(h); known && n < c.minLength {
		return false
	}
	return true
}

// typeListed reports whether the media type of ct is one of c.types.
func (c *Policy) typeListed(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	mt = strings.TrimSpace(mt)
	if mt == "" {
		return false
	}
	for _, t := range c.types {
		if strings.HasSuffix(t, "/") {
			if len(mt) > len(t) && strings.EqualFold(mt[:len(t)], t) {
				return true
			}
		} else if strings.EqualFold(mt, t) {
			return true
		}
	}
	return false
}

// contentLength returns h's Content-Length, and whether it holds a valid one.
func contentLength(h http.Header) (int64, bool) {
	v := h.Get("Content-Length")
	if v == "" {
		return 0, false
	}
	var n int64
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' || n > (1<<62)/10 {
			return 0, false
		}
		n = n*10 + int64(v[i]-'0')
	}
	return n, true
}

// hasToken reports whether a comma-separated list field holds token, in any
// case.
func hasToken(values []string, token string) bool {
	for _, v := range values {
		for elem := range strings.SplitSeq(v, ",") {
			name, _, _ := strings.Cut(elem, "=")
			if strings.EqualFold(strings.TrimSpace(name), token) {
				return true
			}
		}
	}
	return false
}

// addVary adds Accept-Encoding to h's Vary unless it is there (or "*").
func addVary(h http.Header) {
	if !hasToken(h["Vary"], "Accept-Encoding") && !hasToken(h["Vary"], "*") {
		h.Add("Vary", "Accept-Encoding")
	}
}

// weakenETag makes a strong ETag weak (RFC 9110 §8.8.1): the compressed
// bytes are not those the validator was computed over, so it may match
// only weakly (If-None-Match), never strongly (If-Match, If-Range).
func weakenETag(h http.Header) {
	if et := h.Get("Etag"); strings.HasPrefix(et, `"`) {
		h.Set("Etag", "W/"+et)
	}
}

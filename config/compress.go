package config

import (
	"mime"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
)

// Compress is a route's `compress` block: responses compressed on the fly
// in the worker (nginx's gzip, gzip_types, gzip_min_length, gzip_vary,
// gzip_comp_level; the brotli and zstd modules' brotli_* and zstd_*). A
// route without the block compresses nothing, as nginx's gzip is off by
// default; `compress {}` turns it on with the defaults below.
type Compress struct {
	// Encodings are the codings offered, in the server's order of
	// preference when a client weighs several equally: "zstd", "br",
	// "gzip" (default DefaultCompressEncodings).
	Encodings []string
	// Types are the media types compressed, lower case, parameters left
	// out: "text/html", or "text/*" for a whole top-level type (default
	// DefaultCompressTypes).
	Types []string
	// MinLength is the smallest body compressed, in bytes (1..65536,
	// default 1024): a known Content-Length below it, or a body of unknown
	// length that ends before it, goes out as it is.
	MinLength int
	// GzipLevel is 1..9 (default 5); ZstdLevel is a zstd level 1..22
	// (default 3), mapped onto the encoder's four speeds (1, 2-5, 6-9,
	// 10-22); BrotliLevel is a brotli quality 0..9 (default 4): 10 and 11
	// cost a hundred times more CPU and belong in precompressed files.
	GzipLevel, ZstdLevel, BrotliLevel int
}

// Defaults of the compress block.
const (
	DefaultCompressMinLength   = 1024
	DefaultCompressGzipLevel   = 5
	DefaultCompressZstdLevel   = 3
	DefaultCompressBrotliLevel = 4
	// compressMinLengthMax bounds the body a worker holds while it waits
	// to see whether a body of unknown length reaches min_length.
	compressMinLengthMax = 64 << 10
)

// DefaultCompressTypes are the media types compressed unless a compress
// block lists its own: text, and the structured-text application types
// (Caddy's encode default list, and more than nginx's text/html alone).
var DefaultCompressTypes = []string{
	"text/*",
	"application/json",
	"application/javascript",
	"application/xml",
	"application/xhtml+xml",
	"application/atom+xml",
	"application/rss+xml",
	"application/ld+json",
	"application/manifest+json",
	"application/wasm",
	"image/svg+xml",
}

// DefaultCompressEncodings are the codings offered unless a compress block
// lists its own, the server's preference first. Brotli comes last: the
// pure-Go encoder at quality 4 costs about three times gzip's CPU at level 5
// for a point of size on HTML (BENCHMARKS.md), so it is chosen only for a
// client that weighs it above the others; a route that wants it first says
// so.
var DefaultCompressEncodings = []string{"zstd", "gzip", "br"}

// compressEncodings are the codings a worker can produce.
var compressEncodings = []string{"zstd", "br", "gzip"}

var compressSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "encodings"}, {Name: "types"}, {Name: "min_length"},
		{Name: "gzip_level"}, {Name: "zstd_level"}, {Name: "brotli_level"},
	},
}

// compress decodes a route's compress block; nil when it has errors.
func (d *decoder) compress(b *hcl.Block, route string) *Compress {
	attrs := d.attrs(b, compressSchema)
	c := &Compress{
		Encodings:   DefaultCompressEncodings,
		Types:       DefaultCompressTypes,
		MinLength:   DefaultCompressMinLength,
		GzipLevel:   DefaultCompressGzipLevel,
		ZstdLevel:   DefaultCompressZstdLevel,
		BrotliLevel: DefaultCompressBrotliLevel,
	}
	ok := true
	if _, found := attrs["encodings"]; found {
		names, rngs := stringListAttr(d, attrs, "encodings", route+": compress.encodings")
		c.Encodings = nil
		for i, n := range names {
			switch {
			case !slices.Contains(compressEncodings, n):
				d.errorf(rngs[i], "Invalid value", `%s: compress.encodings holds "zstd", "br" and "gzip", got %q.`, route, n)
				ok = false
			case slices.Contains(c.Encodings, n):
				d.errorf(rngs[i], "Invalid value", "%s: compress.encodings names %q twice.", route, n)
				ok = false
			default:
				c.Encodings = append(c.Encodings, n)
			}
		}
		if ok && len(c.Encodings) == 0 {
			d.errorf(attrs["encodings"].Expr.Range(), "Invalid value", "%s: compress.encodings is empty; leave the compress block out to compress nothing.", route)
			ok = false
		}
	}
	if _, found := attrs["types"]; found {
		types, rngs := stringListAttr(d, attrs, "types", route+": compress.types")
		c.Types = nil
		for i, t := range types {
			mt, params, err := mime.ParseMediaType(t)
			top, sub, _ := strings.Cut(mt, "/")
			if err != nil || len(params) > 0 || top == "*" || sub == "" || strings.Contains(sub, "*") && sub != "*" {
				d.errorf(rngs[i], "Invalid value", `%s: compress.types holds media types without parameters, such as "application/json" or "text/*", got %q.`, route, t)
				ok = false
				continue
			}
			c.Types = append(c.Types, mt)
		}
	}
	intAttr(d, attrs, "min_length", route+": compress.min_length", 1, compressMinLengthMax, &c.MinLength)
	intAttr(d, attrs, "gzip_level", route+": compress.gzip_level", 1, 9, &c.GzipLevel)
	intAttr(d, attrs, "zstd_level", route+": compress.zstd_level", 1, 22, &c.ZstdLevel)
	intAttr(d, attrs, "brotli_level", route+": compress.brotli_level", 0, 9, &c.BrotliLevel)
	if !ok {
		return nil
	}
	return c
}

package config

import (
	"slices"
	"testing"
)

// compressRoute is a config whose one route holds block (after its handler).
func compressRoute(block string) string {
	return `listener "http" {
  address = "127.0.0.1:0"
}
route "/" {
  respond {}
` + block + `
}
`
}

func TestCompress(t *testing.T) {
	if c := mustParse(t, compressRoute("")).Routes[0].Compress; c != nil {
		t.Errorf("a route without a compress block compresses: %+v", c)
	}
	def := mustParse(t, compressRoute("  compress {}")).Routes[0].Compress
	switch {
	case def == nil:
		t.Fatal("compress {} gave no Compress")
	case !slices.Equal(def.Encodings, []string{"zstd", "gzip", "br"}),
		!slices.Equal(def.Types, DefaultCompressTypes),
		def.MinLength != 1024, def.GzipLevel != 5, def.ZstdLevel != 3, def.BrotliLevel != 4:
		t.Errorf("compress {} = %+v, want the documented defaults", def)
	}
	c := mustParse(t, compressRoute(`  compress {
    encodings    = ["gzip", "br"]
    types        = ["text/html", "Application/JSON", "text/*"]
    min_length   = 20
    gzip_level   = 1
    zstd_level   = 19
    brotli_level = 0
  }`)).Routes[0].Compress
	if !slices.Equal(c.Encodings, []string{"gzip", "br"}) || !slices.Equal(c.Types, []string{"text/html", "application/json", "text/*"}) ||
		c.MinLength != 20 || c.GzipLevel != 1 || c.ZstdLevel != 19 || c.BrotliLevel != 0 {
		t.Errorf("compress = %+v", c)
	}
	for _, tc := range []struct{ block, want string }{
		{`encodings = ["deflate"]`, `file.hcl:7,18-27`},
		{`encodings = ["deflate"]`, `compress.encodings holds "zstd", "br" and "gzip", got "deflate"`},
		{`encodings = ["gzip", "gzip"]`, `names "gzip" twice`},
		{`encodings = []`, `compress.encodings is empty`},
		{`types = ["text/html; charset=utf-8"]`, `compress.types holds media types without parameters`},
		{`types = ["*/*"]`, `compress.types holds media types`},
		{`types = ["text/h*"]`, `compress.types holds media types`},
		{`types = ["html"]`, `compress.types holds media types`},
		{`min_length = 0`, `compress.min_length must be between 1 and 65536`},
		{`min_length = 100000`, `compress.min_length must be between 1 and 65536`},
		{`gzip_level = 0`, `compress.gzip_level must be between 1 and 9`},
		{`zstd_level = 23`, `compress.zstd_level must be between 1 and 22`},
		{`brotli_level = 11`, `compress.brotli_level must be between 0 and 9`},
		{`level = 5`, `Unsupported argument`},
	} {
		src := compressRoute("  compress {\n    " + tc.block + "\n  }")
		_, err := parse(t, src)
		wantError(t, src, err, tc.want)
	}
	src := compressRoute("  compress {}\n  compress {}")
	_, err := parse(t, src)
	wantError(t, src, err, "Duplicate compress block", "file.hcl:7,")
	src = `listener "http" {
  address = "127.0.0.1:0"
}
route "/" {
  compress {}
}
`
	_, err = parse(t, src)
	wantError(t, src, err, "needs one handler block")
}

package compress

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"

	"github.com/gatehouse-dev/gatehouse/config"
)

// testCompression is a compress block with the defaults but encodings.
func testCompression(t testing.TB, encodings ...string) *Policy {
	t.Helper()
	if len(encodings) == 0 {
		encodings = []string{"zstd", "br", "gzip"}
	}
	return New(&config.Compress{
		Encodings: encodings, Types: config.DefaultCompressTypes, MinLength: config.DefaultCompressMinLength,
		GzipLevel: config.DefaultCompressGzipLevel, ZstdLevel: config.DefaultCompressZstdLevel, BrotliLevel: config.DefaultCompressBrotliLevel,
	}, Pools{})
}

func TestNegotiate(t *testing.T) {
	all := testCompression(t)
	gzipOnly := testCompression(t, "gzip")
	tests := []struct {
		c      *Policy
		accept []string
		want   string // "" for identity
	}{
		{all, nil, ""},
		{all, []string{""}, ""},
		{all, []string{"gzip"}, "gzip"},
		{all, []string{"GZIP"}, "gzip"},
		{all, []string{"x-gzip"}, "gzip"},
		{all, []string{"gzip, br"}, "br"}, // the server's order breaks the tie
		{all, []string{"gzip, deflate, br, zstd"}, "zstd"},
		{all, []string{"gzip;q=1.0, br;q=0.8"}, "gzip"},
		{all, []string{"br;q=0, gzip"}, "gzip"},
		{all, []string{"gzip;q=0"}, ""},
		{all, []string{"gzip;q=abc"}, ""}, // a malformed weight is 0
		{all, []string{"gzip;q=0.001"}, "gzip"},
		{all, []string{"*"}, "zstd"},
		{all, []string{"*;q=0, br"}, "br"},
		{all, []string{"*;q=0.5, gzip;q=0.4"}, "zstd"},
		{all, []string{"identity"}, ""},
		{all, []string{"gzip;q=0.5, identity"}, ""}, // identity preferred
		{all, []string{"gzip;q=0.5, identity;q=0.5"}, "gzip"},
		{all, []string{"gzip, identity;q=0"}, "gzip"},
		{all, []string{"identity;q=0, *;q=0"}, ""}, // nothing acceptable: identity anyway
		{all, []string{"gzip ; q=0.7 , br;q=0.9"}, "br"},
		{all, []string{"gzip;q=0.5", "br"}, "br"}, // two field lines
		{all, []string{"deflate, compress"}, ""},
		{gzipOnly, []string{"br, zstd"}, ""},
		{gzipOnly, []string{"br, zstd, gzip;q=0.1"}, "gzip"},
	}
	for _, tt := range tests {
		idx, ok := tt.c.negotiate(tt.accept)
		got := ""
		if ok {
			got = codingNames[tt.c.codings[idx]]
		}
		if got != tt.want {
			t.Errorf("negotiate(%q) over %d codings = %q, want %q", tt.accept, len(tt.c.codings), got, tt.want)
		}
	}
}

// decode decodes body from coding ("" for none) with a reference decoder
// (compress/gzip for gzip).
func decode(t *testing.T, coding string, body []byte) []byte {
	t.Helper()
	var r io.Reader
	switch coding {
	case "":
		return body
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Fatalf("gzip: %v", err)
		}
		r = zr
	case "zstd":
		zr, err := zstd.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Fatalf("zstd: %v", err)
		}
		defer zr.Close()
		r = zr
	case "br":
		r = brotli.NewReader(bytes.NewReader(body))
	default:
		t.Fatalf("unknown coding %q", coding)
	}
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("decoding %s: %v", coding, err)
	}
	return out
}

// textBody is n bytes of compressible text.
func textBody(n int) []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < n; i++ {
		b.WriteString("line " + strconv.Itoa(i) + ": the quick brown fox jumps over the lazy dog\n")
	}
	return b.Bytes()[:n]
}

func TestCompressWriter(t *testing.T) {
	big, small := textBody(8<<10), textBody(100)
	type handler func(w http.ResponseWriter)
	send := func(status int, ctype string, body []byte, length bool, extra ...string) handler {
		return func(w http.ResponseWriter) {
			h := w.Header()
			if ctype != "" {
				h.Set("Content-Type", ctype)
			}
			if length {
				h.Set("Content-Length", strconv.Itoa(len(body)))
			}
			for i := 0; i+1 < len(extra); i += 2 {
				h.Add(extra[i], extra[i+1])
			}
			w.WriteHeader(status)
			w.Write(body)
		}
	}
	tests := []struct {
		name     string
		method   string
		reqHdr   []string // pairs
		h        handler
		status   int    // the status wanted (0: 200, or the handler's)
		coding   string // the Content-Encoding wanted
		vary     string // the Vary wanted
		etag     string // the ETag wanted ("" for any)
		body     []byte // after decoding
		noLength bool   // Content-Length must be absent
	}{
		{name: "gzip", reqHdr: []string{"Accept-Encoding", "gzip"}, h: send(200, "text/plain; charset=utf-8", big, true, "Etag", `"abc"`),
			coding: "gzip", vary: "Accept-Encoding", etag: `W/"abc"`, body: big, noLength: true},
		{name: "br", reqHdr: []string{"Accept-Encoding", "gzip, br"}, h: send(200, "application/json", big, true),
			coding: "br", vary: "Accept-Encoding", body: big},
		{name: "zstd", reqHdr: []string{"Accept-Encoding", "gzip, br, zstd"}, h: send(200, "text/html", big, false),
			coding: "zstd", vary: "Accept-Encoding", body: big},
		{name: "404 page", reqHdr: []string{"Accept-Encoding", "gzip"}, h: send(404, "text/html", big, true),
			coding: "gzip", vary: "Accept-Encoding", body: big},
		{name: "unknown length streamed", reqHdr: []string{"Accept-Encoding", "gzip"}, h: func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/plain")
			for i := 0; i < len(big); i += 100 {
				w.Write(big[i:min(i+100, len(big))])
			}
		}, coding: "gzip", vary: "Accept-Encoding", body: big},
		{name: "second status while held", reqHdr: []string{"Accept-Encoding", "gzip"}, h: func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusCreated)
			w.WriteHeader(http.StatusTeapot)
			w.Write(big)
		}, status: http.StatusCreated, coding: "gzip", vary: "Accept-Encoding", body: big},
		{name: "sniffed type", reqHdr: []string{"Accept-Encoding", "gzip"}, h: func(w http.ResponseWriter) { w.Write(big) },
			coding: "gzip", vary: "Accept-Encoding", body: big},
		{name: "weak etag stays", reqHdr: []string{"Accept-Encoding", "gzip"}, h: send(200, "text/plain", big, true, "Etag", `W/"abc"`),
			coding: "gzip", vary: "Accept-Encoding", etag: `W/"abc"`, body: big},
		{name: "vary kept", reqHdr: []string{"Accept-Encoding", "gzip"}, h: send(200, "text/plain", big, true, "Vary", "Origin"),
			coding: "gzip", vary: "Origin,Accept-Encoding", body: big},
		{name: "vary not doubled", reqHdr: []string{"Accept-Encoding", "gzip"}, h: send(200, "text/plain", big, true, "Vary", "accept-encoding"),
			coding: "gzip", vary: "accept-encoding", body: big},
		{name: "small with length", reqHdr: []string{"Accept-Encoding", "gzip"}, h: send(200, "text/plain", small, true, "Etag", `"abc"`),
			etag: `"abc"`, body: small},
		{name: "small without length", reqHdr: []string{"Accept-Encoding", "gzip"}, h: send(200, "text/plain", small, false),
			body: small},
		{name: "no accept-encoding", h: send(200, "text/plain", big, true, "Etag", `"abc"`),
			vary: "Accept-Encoding", etag: `"abc"`, body: big},
		{name: "identity only", reqHdr: []string{"Accept-Encoding", "identity, gzip;q=0"}, h: send(200, "text/plain", big, true),
			vary: "Accept-Encoding", body: big},
		{name: "type not listed", reqHdr: []string{"Accept-Encoding", "gzip"}, h: send(200, "image/png", big, true),
			body: big},
		{name: "no type", reqHdr: []string{"Accept-Encoding", "gzip"}, h: func(w http.ResponseWriter) {
			w.Header()["Content-Type"] = nil
			w.Write(big)
		}, body: big},
		{name: "range request", reqHdr: []string{"Accept-Encoding", "gzip", "Range", "bytes=0-"}, h: send(200, "text/plain", big, true, "Etag", `"abc"`),
			etag: `"abc"`, body: big},
		{name: "206", reqHdr: []string{"Accept-Encoding", "gzip"}, h: send(206, "text/plain", big, true),
			body: big},
		{name: "no-transform", reqHdr: []string{"Accept-Encoding", "gzip"}, h: send(200, "text/plain", big, true, "Cache-Control", "public, no-transform"),
			body: big},
		{name: "no-transform asked", reqHdr: []string{"Accept-Encoding", "gzip", "Cache-Control", "no-transform"}, h: send(200, "text/plain", big, true),
			body: big},
		{name: "already encoded", reqHdr: []string{"Accept-Encoding", "gzip"}, h: send(200, "text/plain", big, true, "Content-Encoding", "br"),
			coding: "br", body: big},
		{name: "204", reqHdr: []string{"Accept-Encoding", "gzip"}, h: send(204, "text/plain", nil, false)},
		{name: "304", reqHdr: []string{"Accept-Encoding", "gzip", "If-None-Match", `"abc"`}, h: send(304, "", nil, false, "Etag", `"abc"`),
			etag: `"abc"`},
		{name: "304 of a compressed 200", reqHdr: []string{"Accept-Encoding", "gzip", "If-None-Match", `"x", W/"abc"`}, h: send(304, "", nil, false, "Etag", `"abc"`),
			etag: `W/"abc"`, vary: "Accept-Encoding"},
		{name: "head", method: http.MethodHead, reqHdr: []string{"Accept-Encoding", "gzip"}, h: send(200, "text/plain", big, true, "Etag", `"abc"`),
			coding: "gzip", vary: "Accept-Encoding", etag: `W/"abc"`, noLength: true},
		{name: "head small", method: http.MethodHead, reqHdr: []string{"Accept-Encoding", "gzip"}, h: send(200, "text/plain", small, true)},
	}
	c := testCompression(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			method := tt.method
			if method == "" {
				method = http.MethodGet
			}
			req := httptest.NewRequest(method, "/x", nil)
			for i := 0; i+1 < len(tt.reqHdr); i += 2 {
				req.Header.Set(tt.reqHdr[i], tt.reqHdr[i+1])
			}
			rec := httptest.NewRecorder()
			var cw Writer
			tt.h(cw.Start(rec, req, c))
			if err := cw.Finish(); err != nil {
				t.Fatalf("finish: %v", err)
			}
			cw.End()
			res := rec.Result()
			if tt.status != 0 && res.StatusCode != tt.status {
				t.Errorf("status %d, want %d", res.StatusCode, tt.status)
			}
			if got := res.Header.Get("Content-Encoding"); got != tt.coding {
				t.Errorf("Content-Encoding = %q, want %q", got, tt.coding)
			}
			if got := strings.Join(res.Header.Values("Vary"), ","); got != tt.vary {
				t.Errorf("Vary = %q, want %q", got, tt.vary)
			}
			if got := res.Header.Get("Etag"); tt.etag != "" && got != tt.etag {
				t.Errorf("ETag = %q, want %q", got, tt.etag)
			}
			if _, has := res.Header["Content-Length"]; has && tt.noLength {
				t.Errorf("Content-Length %q kept on a compressed response", res.Header.Get("Content-Length"))
			}
			raw := rec.Body.Bytes()
			if tt.coding == "br" && tt.name == "already encoded" {
				if !bytes.Equal(raw, tt.body) {
					t.Errorf("an encoded body was changed")
				}
				return
			}
			if method == http.MethodHead {
				if len(raw) != 0 && tt.coding != "" {
					t.Errorf("HEAD sent %d body bytes", len(raw))
				}
				return
			}
			if got := decode(t, tt.coding, raw); !bytes.Equal(got, tt.body) {
				t.Errorf("decoded body is %d bytes, not the %d written", len(got), len(tt.body))
			}
		})
	}
}

// TestCompressWriterFlush checks that each Flush puts every byte written so
// far on the wire, decodable, for each coding: a stream's events are not
// held in the encoder.
func TestCompressWriterFlush(t *testing.T) {
	c := testCompression(t)
	for _, coding := range []string{"gzip", "br", "zstd"} {
		t.Run(coding, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, "/events", nil)
			req.Header.Set("Accept-Encoding", coding)
			rec := httptest.NewRecorder()
			var cw Writer
			w := cw.Start(rec, req, c)
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			var sent []byte
			for i := range 3 {
				ev := []byte("id: " + strconv.Itoa(i) + "\ndata: event " + strconv.Itoa(i) + "\n\n")
				w.Write(ev)
				sent = append(sent, ev...)
				w.Flush()
				if !rec.Flushed {
					t.Fatal("the response was not flushed")
				}
				if got := partialDecode(t, coding, rec.Body.Bytes(), len(sent)); !bytes.Equal(got, sent) {
					t.Fatalf("after flush %d the client can decode %q, want %q", i, got, sent)
				}
			}
			if err := cw.Finish(); err != nil {
				t.Fatal(err)
			}
			cw.End()
			if got := rec.Header().Get("Content-Encoding"); got != coding {
				t.Fatalf("Content-Encoding = %q, want %q", got, coding)
			}
			if got := decode(t, coding, rec.Body.Bytes()); !bytes.Equal(got, sent) {
				t.Fatalf("whole stream decodes to %q, want %q", got, sent)
			}
		})
	}
}

// partialDecode decodes the first n bytes of a stream that has not ended.
func partialDecode(t *testing.T, coding string, body []byte, n int) []byte {
	t.Helper()
	var r io.Reader
	switch coding {
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Fatalf("gzip: %v", err)
		}
		r = zr
	case "zstd":
		zr, err := zstd.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Fatalf("zstd: %v", err)
		}
		defer zr.Close()
		r = zr
	default:
		r = brotli.NewReader(bytes.NewReader(body))
	}
	out := make([]byte, n)
	got, _ := io.ReadFull(r, out)
	return out[:got]
}

// discardWriter is a ResponseWriter that keeps nothing, for counting the
// compressing writer's own allocations.
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) WriteHeader(int)             {}
func (d *discardWriter) Write(p []byte) (int, error) { return len(p), nil }

// TestCompressWriterAllocs checks that a compressed response takes its
// encoder from the pool: building one costs hundreds of allocations and
// megabytes; a round should cost a handful of header values.
func TestCompressWriterAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates, and drops pooled values")
	}
	c := testCompression(t)
	body := textBody(16 << 10)
	for _, coding := range []string{"gzip", "br", "zstd"} {
		req := httptest.NewRequest(http.MethodGet, "/x", nil)
		req.Header.Set("Accept-Encoding", coding)
		dw := &discardWriter{h: http.Header{}}
		var cw Writer
		ctype := []string{"text/plain"}
		round := func() {
			clear(dw.h)
			dw.h["Content-Type"] = ctype
			w := cw.Start(dw, req, c)
			w.WriteHeader(http.StatusOK)
			w.Write(body)
			cw.Finish()
			cw.End()
		}
		round()
		if n := testing.AllocsPerRun(50, round); n > 4 {
			t.Errorf("%s: %.1f allocations per compressed response, want at most 4", coding, n)
		}
	}
}

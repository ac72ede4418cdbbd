package e2e

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

const uploadToken = "s3cret-upload-token"

func uploadConfig() string {
	sum := sha256.Sum256([]byte(uploadToken))
	return fmt.Sprintf(`
limits {
  max_body_bytes = 65536
}
cors {
  allow_origins     = ["https://app.example"]
  allow_headers     = ["Authorization"]
  allow_credentials = true
}
route "/upload" {
  max_upload_bytes    = 8388608
  upload_token_sha256 = [%q]
  respond {
    status = 201
    body   = "stored\n"
  }
}
route "/ok" {
  respond {
    body = "ok\n"
  }
}
`, hex.EncodeToString(sum[:]))
}

// A body dribbled at 1 byte/s falls behind the minimum rate and is cut off
// with 408 about 10 s in (grace 10 s; checked continuously).
func TestSlowBodyCutOff(t *testing.T) {
	h := start(t, uploadConfig())
	c := dialFrom(t, "127.0.0.2", h.addr)
	defer c.Close()
	began := time.Now()
	fmt.Fprintf(c, "POST /ok HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
	got := make(chan struct{})
	go func() {
		defer close(got)
		for i := 0; i < 30; i++ {
			if _, err := c.Write([]byte("x")); err != nil {
				return
			}
			select {
			case <-time.After(time.Second):
			case <-got:
				return
			}
		}
	}()
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, _, err := readResponse(bufio.NewReader(c), "POST")
	if err != nil {
		t.Fatalf("no response to the dribbled body: %v", err)
	}
	took := time.Since(began)
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("status %d, want 408", resp.StatusCode)
	}
	if !resp.Close {
		t.Errorf("408 does not close the connection")
	}
	// The product's own bound: grace 10 s, then the first byte short.
	if took < 9*time.Second || took > 20*time.Second {
		t.Errorf("cut off after %v, want about 10s", took)
	}
	t.Logf("dribbled body cut off after %v", took)
}

// An unauthorized upload over max_body_bytes is refused with 401 from the
// head alone: no 100 Continue, no body byte read, connection closed.
func TestUploadUnauthorized(t *testing.T) {
	h := start(t, uploadConfig())
	for _, auth := range []string{"", "Authorization: Bearer wrong\r\n", "Authorization: Basic " + uploadToken + "\r\n"} {
		c := dialFrom(t, "127.0.0.2", h.addr)
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "POST /upload HTTP/1.1\r\nHost: x\r\n%sContent-Length: 5242880\r\nExpect: 100-continue\r\nOrigin: https://app.example\r\n\r\n", auth)
		resp, _, err := readResponse(bufio.NewReader(c), "POST")
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%q: status %d, want 401 (not 100 Continue)", auth, resp.StatusCode)
		}
		if !resp.Close {
			t.Errorf("%q: 401 does not close", auth)
		}
		if got := resp.Header.Get("Access-Control-Allow-Origin"); got != "https://app.example" {
			t.Errorf("%q: 401 without CORS: %q", auth, got)
		}
		if got := resp.Header.Get("Access-Control-Allow-Credentials"); got != "" {
			t.Errorf("transport error carries Allow-Credentials %q", got)
		}
		c.Close()
	}
	// Within max_body_bytes no token is needed.
	cl := newClient(t, "127.0.0.2", h.addr)
	cl.c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(cl.c, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
	if resp, _, err := readResponse(cl.br, "POST"); err != nil || resp.StatusCode != 201 {
		t.Fatalf("small upload: %v %v", resp, err)
	}
	// Over max_body_bytes on a route without uploads: 413 before the body.
	fmt.Fprintf(cl.c, "POST /ok HTTP/1.1\r\nHost: x\r\nContent-Length: 65537\r\nExpect: 100-continue\r\n\r\n")
	if resp, _, err := readResponse(cl.br, "POST"); err != nil || resp.StatusCode != 413 {
		t.Fatalf("oversized body: %v %v", resp, err)
	}
}

// An authorized 2 MiB upload at 64 KiB/s (32 s, well past the minimum rate's
// 10 s grace) is read in full (it stays above the 16 KiB/s minimum rate),
// answered after a 100 Continue.
func TestUploadAuthorizedSlow(t *testing.T) {
	if testing.Short() {
		t.Skip("a 32 s upload")
	}
	// It waits on the client's pace, not the CPU: it overlaps the other
	// long waits at the package's end.
	t.Parallel()
	h := start(t, uploadConfig())
	c := dialFrom(t, "127.0.0.2", h.addr)
	defer c.Close()
	const size, rate = 2 << 20, 64 << 10
	c.SetDeadline(time.Now().Add(3 * time.Minute))
	br := bufio.NewReader(c)
	fmt.Fprintf(c, "POST /upload HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", uploadToken, size)
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100 ") {
		t.Fatalf("want 100 Continue, got %q %v", line, err)
	}
	if blank, _ := br.ReadString('\n'); blank != "\r\n" {
		t.Fatalf("100 Continue not followed by an empty line: %q", blank)
	}
	chunk := make([]byte, rate/8)
	tick := time.NewTicker(time.Second / 8)
	defer tick.Stop()
	for sent := 0; sent < size; sent += len(chunk) {
		<-tick.C
		if _, err := c.Write(chunk); err != nil {
			t.Fatalf("after %d bytes: %v", sent, err)
		}
	}
	resp, body, err := readResponse(br, "POST")
	if err != nil || resp.StatusCode != 201 || body != "stored\n" {
		t.Fatalf("authorized upload: %v %q %v", resp, body, err)
	}
	if resp.Close {
		t.Errorf("the connection was not kept alive after a complete upload")
	}
}

// CORS: allowed origins get the headers (with credentials) on normal
// responses and preflights; transport errors carry them without
// credentials, read from the raw head when it never parsed.
func TestCORS(t *testing.T) {
	h := start(t, uploadConfig())
	cl := newClient(t, "127.0.0.2", h.addr)
	cl.c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(cl.c, "GET /ok HTTP/1.1\r\nHost: x\r\nOrigin: https://app.example\r\n\r\n")
	resp, _, err := readResponse(cl.br, "GET")
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example" || resp.Header.Get("Access-Control-Allow-Credentials") != "true" || resp.Header.Get("Vary") != "Origin" {
		t.Errorf("allowed origin: %v", resp.Header)
	}
	fmt.Fprintf(cl.c, "GET /ok HTTP/1.1\r\nHost: x\r\nOrigin: https://evil.example\r\n\r\n")
	resp, _, err = readResponse(cl.br, "GET")
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Header.Get("Access-Control-Allow-Origin"); got != "" {
		t.Errorf("other origin allowed: %q", got)
	}
	fmt.Fprintf(cl.c, "OPTIONS /upload HTTP/1.1\r\nHost: x\r\nOrigin: https://app.example\r\nAccess-Control-Request-Method: POST\r\n\r\n")
	resp, _, err = readResponse(cl.br, "OPTIONS")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 204 || resp.Header.Get("Access-Control-Allow-Methods") == "" || resp.Header.Get("Access-Control-Max-Age") != "600" {
		t.Errorf("preflight: %d %v", resp.StatusCode, resp.Header)
	}
	// A head that never parses (obs-fold) still gets CORS on its 400.
	c := dialFrom(t, "127.0.0.2", h.addr)
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET /ok HTTP/1.1\r\nHost: x\r\nOrigin: https://app.example\r\nX-Folded: a\r\n b\r\n\r\n")
	resp, _, err = readResponse(bufio.NewReader(c), "GET")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 400 || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example" {
		t.Errorf("unparsed head: %d %v", resp.StatusCode, resp.Header)
	}
	if resp.Header.Get("Access-Control-Allow-Credentials") != "" || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("unparsed head headers: %v", resp.Header)
	}
	if err := expectClosed(c, 5*time.Second); err != nil {
		t.Errorf("400 kept the connection: %v", err)
	}
}

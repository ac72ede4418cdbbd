package e2e

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/textproto"
	"os/exec"
	"strings"
	"testing"
)

// What the upstream is told of the client's scheme and port, and where a
// rewritten redirect points, on a TLS listener and a plain one (issue 26).

// curlHeader runs curl with args and returns the response's status line and
// header, the body discarded.
func curlHeader(t *testing.T, args ...string) (string, http.Header) {
	t.Helper()
	a := append([]string{"-sS", "--http1.1", "--max-time", "10", "-o", "/dev/null", "-D", "-"}, args...)
	out, err := exec.Command("curl", a...).CombinedOutput()
	if err != nil {
		t.Fatalf("curl %q: %v\n%s", args, err, out)
	}
	tp := textproto.NewReader(bufio.NewReader(strings.NewReader(string(out))))
	status, err := tp.ReadLine()
	if err != nil {
		t.Fatalf("curl %q: %v\n%s", args, err, out)
	}
	h, err := tp.ReadMIMEHeader()
	if err != nil {
		t.Fatalf("curl %q: %v\n%s", args, err, out)
	}
	return status, http.Header(h)
}

func TestProxyForwardedListenerScheme(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl not found")
	}
	echo := startEchoUpstream(t)
	raw := startRawUpstream(t, rawResponses)
	s := startTLS(t, fmt.Sprintf(`
trusted_proxies = ["127.0.0.5"]
upstream "echo" {
  addresses = [%q]
}
upstream "raw" {
  addresses = [%q]
}
route "/echo/" {
  proxy {
    upstream = "echo"
  }
}
route "/raw/" {
  proxy {
    upstream = "raw"
  }
}
route "/tls" {
  embedded {
    name = "tlsinfo"
  }
}
`, echo.addr, raw.addr))
	tlsPort, plainPort := portOf(s.tlsAddr), portOf(s.addr)
	origin := map[bool]string{
		true:  "https://default.test:" + tlsPort,
		false: "http://default.test:" + plainPort,
	}
	// curl against either listener as default.test, from src.
	get := func(t *testing.T, tls bool, src, path string, hdr ...string) (string, http.Header) {
		t.Helper()
		args := []string{"--interface", src}
		if tls {
			args = append(args, "--cacert", s.def.cert, "--resolve", "default.test:"+tlsPort+":127.0.0.1")
		} else {
			args = append(args, "--resolve", "default.test:"+plainPort+":127.0.0.1")
		}
		for _, h := range hdr {
			args = append(args, "-H", h)
		}
		return curlHeader(t, append(args, origin[tls]+path)...)
	}

	for _, tt := range []struct {
		name      string
		tls       bool
		proto     string
		port      string
		forwarded string
	}{
		{"tls", true, "https", tlsPort, `for=127.0.0.2;host="default.test:` + tlsPort + `";proto=https`},
		{"plain", false, "http", plainPort, `for=127.0.0.2;host="default.test:` + plainPort + `";proto=http`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// Claims of an untrusted client are replaced by what the
			// listener shows.
			status, h := get(t, tt.tls, "127.0.0.2", "/echo/fwd",
				"X-Forwarded-Proto: gopher", "X-Forwarded-Port: 1", "Forwarded: for=192.0.2.1;proto=gopher")
			if !strings.Contains(status, " 200") {
				t.Fatalf("status %q", status)
			}
			for k, want := range map[string]string{
				"X-Echo-Forwarded-Proto": tt.proto,
				"X-Echo-Forwarded-Host":  "default.test:" + tt.port,
				"X-Echo-Forwarded-Port":  tt.port,
				"X-Echo-Forwarded":       tt.forwarded,
			} {
				if got := h.Get(k); got != want {
					t.Errorf("upstream saw %s = %q, want %q", strings.TrimPrefix(k, "X-Echo-"), got, want)
				}
			}
			// The upstream's redirect to itself points at this listener,
			// scheme and port.
			status, h = get(t, tt.tls, "127.0.0.2", "/raw/redirect")
			want := origin[tt.tls] + "/app/target?x=1"
			if !strings.Contains(status, " 302") || h.Get("Location") != want || h.Get("Refresh") != "3; url="+origin[tt.tls]+"/app/next" {
				t.Errorf("redirect: %q Location %q Refresh %q, want 302 %q", status, h.Get("Location"), h.Get("Refresh"), want)
			}
			// A trusted front's claims are kept, whatever the listener.
			_, h = get(t, tt.tls, "127.0.0.5", "/echo/fwd",
				"X-Forwarded-Proto: http", "X-Forwarded-Host: public.example", "X-Forwarded-Port: 8080",
				"Forwarded: for=198.51.100.7;proto=http")
			for k, want := range map[string]string{
				"X-Echo-Forwarded-Proto": "http",
				"X-Echo-Forwarded-Host":  "public.example",
				"X-Echo-Forwarded-Port":  "8080",
				"X-Echo-Forwarded":       `for=198.51.100.7;proto=http, for=127.0.0.5;host="default.test:` + tt.port + `";proto=` + tt.proto,
			} {
				if got := h.Get(k); got != want {
					t.Errorf("behind a trusted front, upstream saw %s = %q, want %q", strings.TrimPrefix(k, "X-Echo-"), got, want)
				}
			}
			_, h = get(t, tt.tls, "127.0.0.5", "/raw/redirect", "X-Forwarded-Proto: http", "X-Forwarded-Host: public.example")
			if got := h.Get("Location"); got != "http://public.example/app/target?x=1" {
				t.Errorf("behind a trusted front: Location %q, want the front's scheme and host", got)
			}
		})
	}

	// An embedded handler sees the connection's TLS state in r.TLS.
	_, h := get(t, true, "127.0.0.2", "/tls")
	if got, want := h.Get("X-Tls"), "version=TLS 1.3 sni=default.test complete=true"; got != want {
		t.Errorf("over TLS an embedded handler saw %q, want %q", got, want)
	}
	_, h = get(t, false, "127.0.0.2", "/tls")
	if got := h.Get("X-Tls"); got != "none" {
		t.Errorf("over plain HTTP an embedded handler saw %q, want none", got)
	}
}

// tlsInfo is an embedded handler that reports r.TLS in X-Tls.
func tlsInfo(w http.ResponseWriter, r *http.Request) {
	v := "none"
	if cs := r.TLS; cs != nil {
		v = fmt.Sprintf("version=%s sni=%s complete=%v", tls.VersionName(cs.Version), cs.ServerName, cs.HandshakeComplete)
	}
	w.Header().Set("X-Tls", v)
}

package worker

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"strings"
	"testing"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/hashicorp/go-hclog"
)

// failingTransport fails every round trip, as an upstream that refuses.
type failingTransport struct{}

func (failingTransport) RoundTrip(*http.Request) (*http.Response, error) {
	return nil, errors.New("connect: connection refused")
}

// The 502 log line names the request's path as the client asked for it,
// never its query, and the upstream's path when rewrite_prefix changed it.
func TestProxyErrorLogNamesThePath(t *testing.T) {
	for _, tt := range []struct {
		rewrite, want string
	}{
		{"", `path=/py/x/y error=`},
		{"/", `path=/py/x/y upstream_path=/x/y`},
	} {
		var out bytes.Buffer
		w := &Worker{log: hclog.New(&hclog.LoggerOptions{Output: &out, Level: hclog.Debug}), setup: &setup{cfg: &config.Config{}}}
		h := &proxyHandler{w: w, pool: &upstreamPool{w: w, up: &config.Upstream{Name: "app"}},
			cfg: config.Proxy{RewritePrefix: tt.rewrite}, base: "/py"}
		h.rp = &httputil.ReverseProxy{Rewrite: h.rewrite, Transport: failingTransport{}, ErrorHandler: h.fail}
		rec := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "http://site.test/py/x/y?token=secret", nil)
		h.ServeHTTP(rec, r)
		line := out.String()
		if rec.Code != http.StatusBadGateway || !strings.Contains(line, "proxy error") || !strings.Contains(line, tt.want) ||
			strings.Contains(line, "secret") {
			t.Errorf("rewrite_prefix %q: status %d, log %q; want it to hold %q and no query", tt.rewrite, rec.Code, line, tt.want)
		}
	}
}

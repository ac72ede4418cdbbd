package worker

import (
	"net/http"
	"reflect"
	"testing"

	"github.com/gatehouse-dev/gatehouse/config"
)

const headersConfig = `
listener "http" {
  address = "127.0.0.1:0"
  headers {
    set = { "X-Listener" = "l" }
  }
}
limits {
  max_body_bytes = 16
}
log {
  access_log = false
}
route "/" {
  headers {
    set    = { "Cache-Control" = "max-age=60", "Content-Type" = "text/x-set" }
    add    = { "X-Added" = "a" }
    remove = ["X-Listener"]
  }
  headers {
    set    = { "X-Always" = "yes" }
    always = true
  }
  respond {
    body = "ok"
  }
}
route "/gone" {
  headers {
    set    = { "Cache-Control" = "max-age=60" }
  }
  headers {
    set    = { "X-Always" = "yes" }
    always = true
  }
  respond {
    status = 410
  }
}
`

// TestRoundHeaderRules: the listener's rules, then the route's, on a 2xx;
// only those with always on an error, gatehouse's own 413 included.
func TestRoundHeaderRules(t *testing.T) {
	h := startWorkerWith(t, headersConfig, nil)
	for _, tc := range []struct {
		name, req string
		status    int
		want      map[string][]string // nil value: absent
	}{
		{"2xx", get("/"), 200, map[string][]string{
			"Cache-Control": {"max-age=60"}, "Content-Type": {"text/x-set"}, "X-Added": {"a"}, "X-Always": {"yes"},
			"X-Listener": nil, // the route removed the listener's
		}},
		{"error without always", get("/gone"), 410, map[string][]string{
			"Cache-Control": nil, "X-Always": {"yes"}, "X-Listener": nil,
		}},
		{"transport's 413", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 17\r\n\r\n", 413, map[string][]string{
			"Cache-Control": nil, "X-Added": nil, "X-Always": {"yes"}, "Content-Type": {"text/plain; charset=utf-8"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := h.connect()
			cl.write(t, tc.req)
			waitReadable(t, cl.fd)
			h.dispatch(cl, nil)
			r := cl.response(t)
			if r.StatusCode != tc.status {
				t.Errorf("status %d, want %d", r.StatusCode, tc.status)
			}
			for k, v := range tc.want {
				if got := r.Header[k]; !reflect.DeepEqual(got, v) {
					t.Errorf("%s: %q, want %q", k, got, v)
				}
			}
		})
	}
}

// TestHeaderRulesApply: each block removes, then sets, then adds; add
// keeps the handler's values; the shared values are never appended to in
// place.
func TestHeaderRulesApply(t *testing.T) {
	rules := newHeaderRules([]config.HeaderRules{
		{Set: []config.Header{{Name: "X-S", Value: "s"}}, Add: []config.Header{{Name: "Vary", Value: "Origin"}, {Name: "X-S", Value: "t"}}, Remove: []string{"Server"}},
	})
	for range 2 {
		h := http.Header{"Vary": {"Accept-Encoding"}, "X-S": {"old"}, "Server": {"app"}}
		rules.apply(h, 200)
		want := http.Header{"Vary": {"Accept-Encoding", "Origin"}, "X-S": {"s", "t"}}
		if !reflect.DeepEqual(h, want) {
			t.Errorf("after apply: %v, want %v", h, want)
		}
	}
	h := http.Header{"Server": {"app"}}
	rules.apply(h, 404)
	if h.Get("Server") != "app" {
		t.Errorf("rules without always applied to a 404: %v", h)
	}
}

// TestRequestRules: request_headers after the forwarded fields, Host
// included; hide_upstream_headers on the upstream's response.
func TestRequestRules(t *testing.T) {
	rr := newRequestRules(&config.Route{
		RequestHeaders:      &config.RequestHeaders{Set: []config.Header{{Name: "X-Forwarded-Proto", Value: "https"}, {Name: "Host", Value: "app.internal"}}, Remove: []string{"Cookie"}},
		HideUpstreamHeaders: []string{"Server", "X-Powered-By"},
	})
	out := &http.Request{Host: "example.org", Header: http.Header{"Cookie": {"a=b"}, "X-Forwarded-Proto": {"http"}, "Accept": {"*/*"}}}
	rr.request(out)
	if want := (http.Header{"X-Forwarded-Proto": {"https"}, "Accept": {"*/*"}}); !reflect.DeepEqual(out.Header, want) || out.Host != "app.internal" {
		t.Errorf("upstream request: Host %q %v, want app.internal %v", out.Host, out.Header, want)
	}
	res := &http.Response{Header: http.Header{"Server": {"gunicorn"}, "X-Powered-By": {"x"}, "Content-Type": {"text/html"}}}
	rr.response(res)
	if want := (http.Header{"Content-Type": {"text/html"}}); !reflect.DeepEqual(res.Header, want) {
		t.Errorf("upstream response: %v, want %v", res.Header, want)
	}
}

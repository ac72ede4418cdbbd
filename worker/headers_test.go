package worker

import (
	"reflect"
	"testing"
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

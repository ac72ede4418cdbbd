package site

import (
	"net/http"
	"reflect"
	"testing"

	"github.com/gatehouse-dev/gatehouse/config"
)

// TestHeaderRulesApply: each block removes, then sets, then adds; add
// keeps the handler's values; the shared values are never appended to in
// place.
func TestHeaderRulesApply(t *testing.T) {
	rules := NewHeaderRules([]config.HeaderRules{
		{Set: []config.Header{{Name: "X-S", Value: "s"}}, Add: []config.Header{{Name: "Vary", Value: "Origin"}, {Name: "X-S", Value: "t"}}, Remove: []string{"Server"}},
	})
	for range 2 {
		h := http.Header{"Vary": {"Accept-Encoding"}, "X-S": {"old"}, "Server": {"app"}}
		rules.Apply(h, 200)
		want := http.Header{"Vary": {"Accept-Encoding", "Origin"}, "X-S": {"s", "t"}}
		if !reflect.DeepEqual(h, want) {
			t.Errorf("after apply: %v, want %v", h, want)
		}
	}
	h := http.Header{"Server": {"app"}}
	rules.Apply(h, 404)
	if h.Get("Server") != "app" {
		t.Errorf("rules without always applied to a 404: %v", h)
	}
}

// TestRequestRules: request_headers after the forwarded fields, Host
// included; hide_upstream_headers on the upstream's response.
func TestRequestRules(t *testing.T) {
	rr := NewRequestRules(&config.Route{
		RequestHeaders:      &config.RequestHeaders{Set: []config.Header{{Name: "X-Forwarded-Proto", Value: "https"}, {Name: "Host", Value: "app.internal"}}, Remove: []string{"Cookie"}},
		HideUpstreamHeaders: []string{"Server", "X-Powered-By"},
	})
	out := &http.Request{Host: "example.org", Header: http.Header{"Cookie": {"a=b"}, "X-Forwarded-Proto": {"http"}, "Accept": {"*/*"}}}
	rr.Request(out)
	if want := (http.Header{"X-Forwarded-Proto": {"https"}, "Accept": {"*/*"}}); !reflect.DeepEqual(out.Header, want) || out.Host != "app.internal" {
		t.Errorf("upstream request: Host %q %v, want app.internal %v", out.Host, out.Header, want)
	}
	res := &http.Response{Header: http.Header{"Server": {"gunicorn"}, "X-Powered-By": {"x"}, "Content-Type": {"text/html"}}}
	rr.Response(res)
	if want := (http.Header{"Content-Type": {"text/html"}}); !reflect.DeepEqual(res.Header, want) {
		t.Errorf("upstream response: %v, want %v", res.Header, want)
	}
}

package config

import (
	"reflect"
	"testing"
)

func TestHeaderRules(t *testing.T) {
	src := `
listener "http" {
  address = "127.0.0.1:0"
  headers {
    set = { "strict-transport-security" = "max-age=60" }
  }
}
upstream "app" {
  addresses = ["127.0.0.1:9"]
}
route "/" {
  headers {
    set    = { "Cache-Control" = "max-age=3600", X-Frame-Options = "DENY" }
    add    = { "Link" = "</s.css>; rel=preload" }
    remove = ["x-powered-by"]
  }
  headers {
    set    = { "Referrer-Policy" = "no-referrer" }
    always = true
  }
  request_headers {
    set    = { "X-Env" = "prod", Host = "app.internal" }
    remove = ["cookie"]
  }
  hide_upstream_headers = ["Server", "x-powered-by"]
  proxy {
    upstream = "app"
  }
}
`
	cfg := mustParse(t, src)
	if got, want := cfg.Listeners[0].Headers, []HeaderRules{{Set: []Header{{"Strict-Transport-Security", "max-age=60"}}}}; !reflect.DeepEqual(got, want) {
		t.Errorf("listener Headers = %+v, want %+v", got, want)
	}
	r := cfg.Routes[0]
	want := []HeaderRules{
		{Set: []Header{{"Cache-Control", "max-age=3600"}, {"X-Frame-Options", "DENY"}}, Add: []Header{{"Link", "</s.css>; rel=preload"}}, Remove: []string{"X-Powered-By"}},
		{Set: []Header{{"Referrer-Policy", "no-referrer"}}, Always: true},
	}
	if !reflect.DeepEqual(r.Headers, want) {
		t.Errorf("route Headers = %+v, want %+v", r.Headers, want)
	}
	wantReq := &RequestHeaders{Set: []Header{{"X-Env", "prod"}, {"Host", "app.internal"}}, Remove: []string{"Cookie"}}
	if !reflect.DeepEqual(r.RequestHeaders, wantReq) {
		t.Errorf("RequestHeaders = %+v, want %+v", r.RequestHeaders, wantReq)
	}
	if want := []string{"Server", "X-Powered-By"}; !reflect.DeepEqual(r.HideUpstreamHeaders, want) {
		t.Errorf("HideUpstreamHeaders = %q, want %q", r.HideUpstreamHeaders, want)
	}
	if r.Proxy == nil {
		t.Error("the proxy handler was lost beside the header blocks")
	}
}

func TestHeaderRulesOnStatus(t *testing.T) {
	plain, always := HeaderRules{}, HeaderRules{Always: true}
	for _, s := range []int{200, 201, 204, 206, 301, 302, 303, 304, 307, 308} {
		if !plain.OnStatus(s) {
			t.Errorf("OnStatus(%d) = false without always, want true (nginx's list)", s)
		}
	}
	for _, s := range []int{202, 300, 400, 404, 413, 500, 502, 503} {
		if plain.OnStatus(s) {
			t.Errorf("OnStatus(%d) = true without always, want false", s)
		}
		if !always.OnStatus(s) {
			t.Errorf("OnStatus(%d) = false with always, want true", s)
		}
	}
}

func TestHeaderRuleErrors(t *testing.T) {
	// minimal ends on line 7; the route or upstream starts on line 8.
	const up = "upstream \"app\" {\n  addresses = [\"127.0.0.1:9\"]\n}\n"
	route := func(body string) string { return minimal + "route \"/x\" {\n" + body + "  respond {}\n}\n" }
	tests := []struct{ src, err string }{
		{route("  headers {\n    set = { \"Content-Length\" = \"5\" }\n  }\n"), `file.hcl:10,13-29: Forbidden header; route "/x": headers.set: Content-Length is a framing field`},
		{route("  headers {\n    add = { \"transfer-encoding\" = \"gzip\" }\n  }\n"), `file.hcl:10,13-32: Forbidden header; route "/x": headers.add: Transfer-Encoding is a framing field`},
		{route("  headers {\n    remove = [\"Connection\"]\n  }\n"), `file.hcl:10,15-27: Forbidden header; route "/x": headers.remove: Connection is a hop-by-hop field`},
		{route("  headers {\n    set = { \"X-Content-Type-Options\" = \"x\" }\n  }\n"), `file.hcl:10,13-37: Forbidden header; route "/x": headers.set: gatehouse sends X-Content-Type-Options: nosniff`},
		{route("  headers {\n    set = { \"Host\" = \"x\" }\n  }\n"), `file.hcl:10,13-19: Forbidden header; route "/x": headers.set: Host can only be set, toward an upstream`},
		{route("  headers {\n    set = { \"X-A\" = \"a\\r\\nX-B: b\" }\n  }\n"), `file.hcl:10,21-34: Invalid header value; route "/x": headers.set["X-A"] may not hold CR, LF`},
		{route("  headers {\n    set = { \"X-A\" = \" a\" }\n  }\n"), `file.hcl:10,21-25: Invalid header value`},
		{route("  headers {\n    set = { \"X A\" = \"a\" }\n  }\n"), `file.hcl:10,13-18: Invalid header name; route "/x": headers.set: "X A" is not a header field name`},
		{route("  headers {\n    set = { \"\" = \"a\" }\n  }\n"), `file.hcl:10,13-15: Invalid header name`},
		{route("  headers {\n    set = { \"X-A\" = 1 }\n  }\n"), `file.hcl:10,21-22: Incorrect attribute value type; route "/x": headers.set["X-A"] must be a string`},
		{route("  headers {\n    set = { \"X-A\" = \"a\", \"x-a\" = \"b\" }\n  }\n"), `file.hcl:10,26-31: Duplicate header; route "/x": headers.set names X-A twice`},
		{route("  headers {\n    set = [\"X-A\"]\n  }\n"), `file.hcl:10,11-18: Invalid value; route "/x": headers.set must be an object`},
		{route("  headers {\n    always = \"yes\"\n  }\n"), `file.hcl:10,14-19: Incorrect attribute value type; route "/x": headers.always must be true or false`},
		{route("  headers {\n    sets = {}\n  }\n"), `file.hcl:10,5-9: Unsupported argument`},
		{route("  request_headers {\n    set = { \"X-A\" = \"a\" }\n  }\n"), `file.hcl:9,3-18: Invalid request_headers block; route "/x": request_headers are sent to an upstream; they need a proxy handler.`},
		{route("  hide_upstream_headers = [\"Server\"]\n"), `file.hcl:9,3-37: Invalid hide_upstream_headers; route "/x": hide_upstream_headers removes fields of an upstream's responses; it needs a proxy handler.`},
		{up + "route \"/x\" {\n  request_headers {\n    remove = [\"Host\"]\n  }\n  proxy {\n    upstream = \"app\"\n  }\n}\n", `file.hcl:13,15-21: Forbidden header; route "/x": request_headers.remove: Host can only be set`},
		{up + "route \"/x\" {\n  request_headers {\n    set = { \"Content-Length\" = \"0\" }\n  }\n  proxy {\n    upstream = \"app\"\n  }\n}\n", `file.hcl:13,13-29: Forbidden header; route "/x": request_headers.set: Content-Length is a framing field`},
		{up + "route \"/x\" {\n  request_headers {}\n  request_headers {}\n  proxy {\n    upstream = \"app\"\n  }\n}\n", `file.hcl:13,3-18: Duplicate request_headers block`},
		{up + "route \"/x\" {\n  hide_upstream_headers = [\"Transfer-Encoding\"]\n  proxy {\n    upstream = \"app\"\n  }\n}\n", `file.hcl:12,28-47: Forbidden header; route "/x": hide_upstream_headers: Transfer-Encoding is a framing field`},
		{"listener \"http\" {\n  address = \"127.0.0.1:0\"\n  headers {\n    add = { \"Keep-Alive\" = \"timeout=5\" }\n  }\n}\nroute \"/\" {\n  respond {}\n}\n", `file.hcl:4,13-25: Forbidden header; listener "http": headers.add: Keep-Alive is a hop-by-hop field`},
	}
	for _, tt := range tests {
		src := tt.src
		if src[0] == 'u' {
			src = minimal + src
		}
		_, err := parse(t, src)
		wantError(t, src, err, tt.err)
	}
}

package config

import (
	"strings"
	"testing"
	"time"
)

// TestStreamsAndUpgrade: route classes, the proxy's upgrade list and idle
// timeout, and the streams block, with their defaults and their errors.
func TestStreamsAndUpgrade(t *testing.T) {
	def := mustParse(t, upstreamBase+`
upstream "app" {
  addresses = ["127.0.0.1:9000"]
}
`)
	if def.Streams != (Streams{Max: 1024, PerClient: 16}) {
		t.Errorf("default streams = %+v", def.Streams)
	}
	if p := def.Routes[0].Proxy; len(p.Upgrade) != 0 || p.IdleTimeout != 60*time.Second || p.Upgrades("websocket") {
		t.Errorf("default proxy = %+v, want no upgrade and a 60s idle timeout", p)
	}
	if def.Routes[0].Stream {
		t.Error("a route is request-class by default")
	}
	cfg := mustParse(t, `
listener "http" {
  address = "127.0.0.1:0"
}
streams {
  max        = 100
  per_client = 4
}
upstream "app" {
  addresses = ["127.0.0.1:9000"]
}
route "/events" {
  class = "stream"
  proxy {
    upstream = "app"
  }
}
route "/ws" {
  class = "request"
  proxy {
    upstream     = "app"
    upgrade      = ["WebSocket", "h2c"]
    idle_timeout = "5m"
  }
}
`)
	if cfg.Streams != (Streams{Max: 100, PerClient: 4}) {
		t.Errorf("streams = %+v", cfg.Streams)
	}
	if !cfg.Routes[0].Stream || cfg.Routes[1].Stream {
		t.Errorf("classes: /events stream %v, /ws stream %v", cfg.Routes[0].Stream, cfg.Routes[1].Stream)
	}
	p := cfg.Routes[1].Proxy
	if p.IdleTimeout != 5*time.Minute || !p.Upgrades("websocket") || !p.Upgrades("WEBSOCKET") || !p.Upgrades("h2c/1") || p.Upgrades("irc") {
		t.Errorf("proxy = %+v", p)
	}
	for _, tc := range []struct{ src, want string }{
		{`class = "bulk"`, `class is "request" or "stream"`},
		{"proxy {\n upstream = \"app\"\n upgrade = [\"web socket\"]\n}", `proxy.upgrade names protocols`},
		{"proxy {\n upstream = \"app\"\n idle_timeout = \"0s\"\n}", `idle_timeout`},
	} {
		src := `
listener "http" {
  address = "127.0.0.1:0"
}
upstream "app" {
  addresses = ["127.0.0.1:9000"]
}
route "/x" {
  ` + tc.src + `
}
`
		if !strings.Contains(tc.src, "proxy") {
			src = strings.Replace(src, tc.src, tc.src+"\n  proxy {\n    upstream = \"app\"\n  }", 1)
		}
		if _, err := parse(t, src); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %q", tc.src, err, tc.want)
		}
	}
	for _, s := range []string{"max = 0", "per_client = 0", "max = 2000000"} {
		src := upstreamBase + "upstream \"app\" {\n  addresses = [\"127.0.0.1:9000\"]\n}\nstreams {\n  " + s + "\n}\n"
		if _, err := parse(t, src); err == nil || !strings.Contains(err.Error(), "streams.") {
			t.Errorf("streams { %s }: error %v", s, err)
		}
	}
}

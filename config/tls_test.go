package config

import (
	"reflect"
	"testing"
)

func TestTLSListener(t *testing.T) {
	cfg := mustParse(t, `
listener "https" {
  address = "127.0.0.1:0"
  tls {
    certificate "default" {
      cert = "default.pem"
      key  = "/keys/default.key"
    }
    certificate "example" {
      cert = "certs/example.pem"
      key  = "keys/example.key"
    }
  }
}
route "/" {
  respond {}
}
`)
	want := &TLS{Certificates: []Certificate{
		{Name: "default", Cert: "/base/default.pem", Key: "/keys/default.key", Where: "file.hcl:5"},
		{Name: "example", Cert: "/base/certs/example.pem", Key: "/base/keys/example.key", Where: "file.hcl:9"},
	}}
	if got := cfg.Listeners[0].TLS; !reflect.DeepEqual(got, want) {
		t.Errorf("TLS = %+v, want %+v", got, want)
	}
	if cfg := mustParse(t, minimal); cfg.Listeners[0].TLS != nil {
		t.Errorf("a listener without a tls block has TLS %+v", cfg.Listeners[0].TLS)
	}
}

func TestTLSErrors(t *testing.T) {
	for _, tc := range []struct {
		src  string
		want []string
	}{
		{`tls {
  }`, []string{"file.hcl:4", "tls needs at least one certificate"}},
		{`tls {
    certificate "a" {
      cert = "a.pem"
    }
  }`, []string{"file.hcl:5", `"key" is required`}},
		{`tls {
    certificate "a" {
      cert = ""
      key = "a.key"
    }
  }`, []string{"file.hcl:6", "cert must be a file path"}},
		{`tls {
    certificate "a" {
      cert = "a.pem"
      key = "a.key"
    }
    certificate "a" {
      cert = "b.pem"
      key = "b.key"
    }
  }`, []string{"file.hcl:9", `certificate "a" is already defined at file.hcl:5`}},
		{`tls {
    certificate "a" {
      cert = "a.pem"
      key = "a.key"
    }
  }
  tls {
    certificate "b" {
      cert = "b.pem"
      key = "b.key"
    }
  }`, []string{"file.hcl:10", "more than one tls block"}},
		{`tls {
    certificate "a" {
      cert = "a.pem"
      key = "a.key"
      hsts = true
    }
  }`, []string{"file.hcl:8", "hsts"}},
	} {
		src := `
listener "https" {
  address = "127.0.0.1:0"
  ` + tc.src + `
}
route "/" {
  respond {}
}
`
		_, err := parse(t, src)
		wantError(t, src, err, tc.want...)
	}
}

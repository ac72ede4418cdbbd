package supervisor

import (
	"fmt"
	"testing"

	"github.com/gatehouse-dev/gatehouse/config"
)

// A reload that changes what workers answer by host or by listener (route
// hosts, hsts, https_redirect) replaces the workers, which read it only
// from Hello; one that changes nothing of it does not.
func TestReloadReplacesWorkersForVhosts(t *testing.T) {
	parse := func(src string) *config.Config {
		t.Helper()
		cfg, err := config.Parse([]byte(src), "reload.hcl", config.ParseOptions{BaseDir: "/", SkipFSChecks: true})
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	const tlsListener = `listener "https" {
  address = "127.0.0.1:8443"
  tls {
    certificate "a" {
      cert = "a.pem"
      key  = "a.key"
    }
  }
%s}
listener "http" {
  address = "127.0.0.1:8080"
%s}
route "/" {
%s  respond {}
}
`
	base := parse(fmt.Sprintf(tlsListener, "", "", ""))
	for _, tc := range []struct {
		name    string
		src     string
		replace bool
	}{
		{"unchanged", fmt.Sprintf(tlsListener, "", "", ""), false},
		{"hosts", fmt.Sprintf(tlsListener, "", "", "  hosts = [\"example.org\"]\n"), true},
		{"hsts", fmt.Sprintf(tlsListener, "  hsts {}\n", "", ""), true},
		{"https_redirect", fmt.Sprintf(tlsListener, "", "  https_redirect = \"https\"\n", ""), true},
	} {
		if got := workersNeedReplacing(base, parse(tc.src)); got != tc.replace {
			t.Errorf("%s: workersNeedReplacing = %v, want %v", tc.name, got, tc.replace)
		}
	}
}

package config

import (
	"fmt"
	"testing"
)

func TestRouteMaxBodyBytes(t *testing.T) {
	src := minimal + "route \"/api/\" {\n  max_body_bytes = 10485760\n  respond {}\n}\nroute \"/none/\" {\n  max_body_bytes = 0\n  respond {}\n}\n"
	cfg := mustParse(t, src)
	if cfg.Routes[0].MaxBodyBytes != nil {
		t.Errorf("route / MaxBodyBytes = %d, want nil (the global limit)", *cfg.Routes[0].MaxBodyBytes)
	}
	if p := cfg.Routes[1].MaxBodyBytes; p == nil || *p != 10<<20 {
		t.Errorf("route /api/ MaxBodyBytes = %v, want 10485760", p)
	}
	if p := cfg.Routes[2].MaxBodyBytes; p == nil || *p != 0 {
		t.Errorf("route /none/ MaxBodyBytes = %v, want 0", p)
	}
	for _, tt := range []struct{ route, err string }{
		{"route \"/x\" {\n  max_body_bytes = -1\n  respond {}\n}\n", `file.hcl:9,20-22: Invalid value; route "/x": max_body_bytes must be between 0 and 1099511627776`},
		{"route \"/x\" {\n  max_body_bytes = \"1M\"\n  respond {}\n}\n", `file.hcl:9,20-24: `},
	} {
		src := minimal + tt.route
		_, err := parse(t, src)
		wantError(t, src, err, tt.err)
	}
}

// TestUploadWithoutToken: max_upload_bytes with no upload_token_sha256 is
// refused by the host checks (every larger upload would get 401), unless
// the program authorizes uploads itself; a re-parsing worker accepts it.
func TestUploadWithoutToken(t *testing.T) {
	const token = "upload_token_sha256 = [\"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\"]\n"
	route := "route \"/up/\" {\n  max_upload_bytes = 104857600\n  %s  respond {}\n}\n"
	noToken := minimal + fmt.Sprintf(route, "")
	withToken := minimal + fmt.Sprintf(route, token)
	base := readableTempDir(t)

	_, err := Parse([]byte(noToken), "file.hcl", ParseOptions{BaseDir: base})
	wantError(t, noToken, err, `file.hcl:9,3-31: Missing upload_token_sha256; route "/up/": max_upload_bytes raises the cap only for a request carrying an accepted token`)
	if _, err := Parse([]byte(withToken), "file.hcl", ParseOptions{BaseDir: base}); err != nil {
		t.Errorf("with a token: %v", err)
	}
	if _, err := Parse([]byte(noToken), "file.hcl", ParseOptions{BaseDir: base, AuthorizesUploads: true}); err != nil {
		t.Errorf("AuthorizesUploads: %v", err)
	}
	if _, err := parse(t, noToken); err != nil {
		t.Errorf("SkipFSChecks (a worker's re-parse): %v", err)
	}
}

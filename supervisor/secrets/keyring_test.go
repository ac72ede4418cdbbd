package secrets

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/gatehouse-dev/gatehouse/internal/testcert"
)

// keysConfig is a configuration with one TLS listener whose certificates
// are named names, each read from NAME.test.pem and NAME.test.key in dir.
func keysConfig(t *testing.T, dir string, names ...string) *config.Config {
	t.Helper()
	src := "listener \"https\" {\n  address = \"127.0.0.1:0\"\n  tls {\n"
	for _, n := range names {
		src += fmt.Sprintf("    certificate %q {\n      cert = %q\n      key  = %q\n    }\n", n,
			filepath.Join(dir, n+".test.pem"), filepath.Join(dir, n+".test.key"))
	}
	src += "  }\n}\nroute \"/\" {\n  respond {\n    body = \"x\"\n  }\n}\n"
	cfg, err := config.Parse([]byte(src), "keys.hcl", config.ParseOptions{BaseDir: dir, SkipCertificates: true})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// A reload reads every certificate again; one that fails keeps the running
// one (same chain, same key) and is reported with the file and line at
// fault; one that loads replaces it.
func TestKeyringReload(t *testing.T) {
	dir := t.TempDir()
	testcert.WritePair(t, dir, "a.test", false)
	testcert.WritePair(t, dir, "b.test", true)
	cfg := keysConfig(t, dir, "a", "b")
	start, err := Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1_000_000, 0)

	// Nothing changed: the same certificates, no failure.
	same, err := Reload(cfg, start, nil, t0)
	if err != nil || len(same.failed) != 0 || !Same(start, same) {
		t.Fatalf("an unchanged reload: %v, failed %v, same %v", err, same.Failures(), Same(start, same))
	}

	// a's file damaged at line 3, b renewed.
	aPEM := filepath.Join(dir, "a.test.pem")
	if err := os.WriteFile(aPEM, []byte("# renewed\n\n-----BEGIN CERTIFICATE-----\n!!not base64!!\n-----END CERTIFICATE-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	testcert.WritePair(t, dir, "b.test", true)
	k, err := Reload(cfg, same, nil, t0)
	if err != nil {
		t.Fatal(err)
	}
	if len(k.failed) != 1 || !k.failed[0].Kept || k.failed[0].Name != "a" || !k.failed[0].Since.Equal(t0) ||
		!strings.Contains(k.failed[0].Error, aPEM+":3:") || !strings.Contains(k.failed[0].Error, "keys.hcl:4") {
		t.Fatalf("failures %+v", k.failed)
	}
	if len(k.certs) != 2 || string(k.certs[0].Chain[0]) != string(start.certs[0].Chain[0]) || k.keys[k.certs[0].KeyId] != same.keys[0] {
		t.Errorf("a is not the running certificate and key")
	}
	if string(k.certs[1].Chain[0]) == string(start.certs[1].Chain[0]) || k.info[1].Loaded != t0 {
		t.Errorf("b was not reloaded")
	}
	if Same(start, k) {
		t.Errorf("a renewed certificate counts as the same")
	}

	// Still failing later: the failure keeps its start.
	k2, err := Reload(cfg, k, nil, t0.Add(time.Hour))
	if err != nil || len(k2.failed) != 1 || !k2.failed[0].Since.Equal(t0) || !Same(k, k2) {
		t.Fatalf("failing again: %v %+v", err, k2.failed)
	}

	// A key that is not the certificate's.
	testcert.WritePair(t, dir, "a.test", false)
	other := t.TempDir()
	testcert.WritePair(t, other, "a.test", false)
	os.Rename(filepath.Join(other, "a.test.key"), filepath.Join(dir, "a.test.key"))
	k3, err := Reload(cfg, k2, nil, t0)
	if err != nil || len(k3.failed) != 1 || !strings.Contains(k3.failed[0].Error, "does not match") {
		t.Fatalf("a mismatched key: %v %+v", err, k3.failed)
	}

	// Fixed: loaded, and no failure is left.
	testcert.WritePair(t, dir, "a.test", false)
	k4, err := Reload(cfg, k3, nil, t0)
	if err != nil || len(k4.failed) != 0 || string(k4.certs[0].Chain[0]) == string(start.certs[0].Chain[0]) {
		t.Fatalf("fixed: %v %+v", err, k4.failed)
	}

	// A new certificate that does not load is not served; a listener
	// left with none fails the reload; at start, any failure does.
	withC := keysConfig(t, dir, "a", "b", "c")
	k5, err := Reload(withC, k4, nil, t0)
	if err != nil || len(k5.certs) != 2 || len(k5.failed) != 1 || k5.failed[0].Kept || !strings.Contains(k5.failed[0].Error, "c.test.pem") {
		t.Fatalf("a new certificate whose files are missing: %v %+v", err, k5.failed)
	}
	if _, err := Reload(keysConfig(t, dir, "c"), k4, nil, t0); err == nil || !strings.Contains(err.Error(), "no certificate could be loaded") {
		t.Errorf("a listener with no certificate: %v", err)
	}
	if _, err := Load(withC); err == nil || !strings.Contains(err.Error(), "keys.hcl:") {
		t.Errorf("at start: %v", err)
	}
}

package config

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestClusterAbsent(t *testing.T) {
	if c := mustParse(t, minimal).Cluster; c != nil {
		t.Fatalf("Cluster = %+v without a cluster block", c)
	}
}

func TestClusterBlock(t *testing.T) {
	cfg := mustParse(t, minimal+`cluster {
  address = "127.0.0.1:6380"
  user = "gatehouse"
  password_file = "store.pass"
  secret_file = "/etc/gatehouse/cluster.secret"
  tls = true
  tls_ca_file = "ca.pem"
  tls_server_name = "store.internal"
  key_prefix = "gh:prod:"
  instance = "edge-a"
  store_timeout = "10ms"
}
`)
	want := Cluster{Address: "127.0.0.1:6380", TLS: true, TLSCAFile: "/base/ca.pem", TLSServerName: "store.internal",
		User: "gatehouse", PasswordFile: "/base/store.pass", SecretFile: "/etc/gatehouse/cluster.secret",
		KeyPrefix: "gh:prod:", Instance: "edge-a", StoreTimeout: 10 * time.Millisecond}
	if *cfg.Cluster != want {
		t.Fatalf("Cluster = %+v\nwant      %+v", *cfg.Cluster, want)
	}

	c := mustParse(t, minimal+"cluster {\n  address = \"rediss://store.internal/3\"\n}\n").Cluster
	if c.Address != "store.internal:6379" || !c.TLS || c.DB != 3 || c.KeyPrefix != "gatehouse:" || c.StoreTimeout != DefaultStoreTimeout || c.Instance != "" {
		t.Fatalf("Cluster from a URL = %+v", c)
	}
}

// Every problem is an error at its line; credentials in the address are
// refused since the file goes to every worker.
func TestClusterErrors(t *testing.T) {
	for _, tc := range []struct{ attr, want string }{
		{`address = "redis://u:secret@h:6379"`, "file.hcl:9,13-"},
		{`address = "redis://u:secret@h:6379"`, "must not hold credentials"},
		{`address = "http://h:1"`, `got scheme "http"`},
		{`address = "h"`, "must be host:port"},
		{`address = "h:0"`, "the port must be 1 to 65535"},
		{`address = "redis://h/99"`, "the database must be 0 to 15"},
		{"address = \"h:1\"\n  store_timeout = \"5s\"", "cluster.store_timeout must be between"},
		{"address = \"h:1\"\n  key_prefix = \"a*\"", "cluster.key_prefix must be"},
		{"address = \"h:1\"\n  password = \"x\"", `Unsupported argument; An argument named "password" is not expected here`},
		{`user = "x"`, `The argument "address" is required`},
	} {
		src := minimal + "cluster {\n  " + tc.attr + "\n}\n"
		_, err := parse(t, src)
		wantError(t, src, err, tc.want)
	}
	src := minimal + "cluster {\n  address = \"h:1\"\n}\ncluster {\n  address = \"h:2\"\n}\n"
	_, err := parse(t, src)
	wantError(t, src, err, "Duplicate cluster block")
}

// With the host checks, the password and secret files must be readable and
// the secret long enough; their content is not kept in the Config.
func TestClusterFiles(t *testing.T) {
	dir := readableTempDir(t)
	if err := os.WriteFile(filepath.Join(dir, "pass"), []byte("pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "short"), []byte("0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	src := minimal + "cluster {\n  address = \"h:1\"\n  password_file = \"pass\"\n  secret_file = \"short\"\n}\n"
	err := hostParse(dir, src)
	wantError(t, src, err, "file.hcl:11,17-", `cluster.secret_file "`+filepath.Join(dir, "short")+`" holds 10 bytes, fewer than the 32`)
	src = minimal + "cluster {\n  address = \"h:1\"\n  password_file = \"missing\"\n}\n"
	err = hostParse(dir, src)
	wantError(t, src, err, "file.hcl:10,19-", "cluster.password_file", "cannot be read by the supervisor")
	cfg, err := Parse([]byte(minimal+"cluster {\n  address = \"h:1\"\n  password_file = \"pass\"\n}\n"), "file.hcl", ParseOptions{BaseDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Cluster.PasswordFile != filepath.Join(dir, "pass") {
		t.Errorf("PasswordFile = %q", cfg.Cluster.PasswordFile)
	}
}

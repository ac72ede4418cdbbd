package config

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testCert is a certificate and its key, for the certificate tests.
type testCert struct {
	cert *x509.Certificate
	key  crypto.Signer
}

// newTestCert makes a certificate for cn signed by issuer (nil: self-signed),
// valid from an hour ago until notAfter.
func newTestCert(tb testing.TB, cn string, issuer *testCert, ca bool, notAfter time.Time) *testCert {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: notAfter.Add(-48 * time.Hour).Add(-time.Hour), NotAfter: notAfter,
		BasicConstraintsValid: true, IsCA: ca}
	if !ca {
		tmpl.DNSNames = []string{cn}
	}
	if n := time.Now().Add(-time.Hour); tmpl.NotBefore.After(n) {
		tmpl.NotBefore = n
	}
	parent, signer := tmpl, crypto.Signer(key)
	if issuer != nil {
		parent, signer = issuer.cert, issuer.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), signer)
	if err != nil {
		tb.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	return &testCert{cert: cert, key: key}
}

// writeChain writes the certificates of chain, in order, to dir/name.
func writeChain(tb testing.TB, dir, name string, chain ...*testCert) {
	tb.Helper()
	var b []byte
	for _, c := range chain {
		b = append(b, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.cert.Raw})...)
	}
	if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
		tb.Fatal(err)
	}
}

// writeKey writes c's key to dir/name with mode.
func writeKey(tb testing.TB, dir, name string, c *testCert, mode os.FileMode) {
	tb.Helper()
	p8, err := x509.MarshalPKCS8PrivateKey(c.key)
	if err != nil {
		tb.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p8}), mode); err != nil {
		tb.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		tb.Fatal(err)
	}
}

// tlsSource is a file with one TLS listener per element of listeners, each
// with one certificate block "NAME" reading NAME.pem and NAME.key, after
// extra.
func tlsSource(extra string, listeners ...string) string {
	src := extra + "route \"/\" {\n  respond {}\n}\n"
	for i, n := range listeners {
		src += fmt.Sprintf("listener %q {\n  address = \"127.0.0.1:%d\"\n  tls {\n    certificate %q {\n      cert = \"%[1]s.pem\"\n      key  = \"%[1]s.key\"\n    }\n  }\n}\n", n, 8443+i, n)
	}
	return src
}

// blockLine is "file.hcl:N", where the certificate block named name starts.
func blockLine(src, name string) string {
	for i, l := range strings.Split(src, "\n") {
		if strings.Contains(l, fmt.Sprintf("certificate %q", name)) {
			return fmt.Sprintf("file.hcl:%d,", i+1)
		}
	}
	panic("no certificate block " + name)
}

// Every certificate block's files are loaded as serving loads them, and
// every problem is an error at the block, with the file (and the PEM
// block's line) at fault.
func TestCertificateErrors(t *testing.T) {
	future := time.Now().Add(90 * 24 * time.Hour)
	root := newTestCert(t, "Test Root", nil, true, future)
	inter := newTestCert(t, "Test Intermediate", root, true, future)
	leaf := newTestCert(t, "a.test", inter, false, future)
	other := newTestCert(t, "other.test", nil, false, future)
	for _, tc := range []struct {
		name  string
		setup func(dir string)
		want  []string // nil: valid
	}{
		{"good chain", func(dir string) {
			writeChain(t, dir, "a.pem", leaf, inter, root)
			writeKey(t, dir, "a.key", leaf, 0o600)
		}, nil},
		{"missing cert file", func(dir string) {
			writeKey(t, dir, "a.key", leaf, 0o600)
		}, []string{"Invalid certificate", `listener "a": tls: certificate "a": open `, "a.pem: no such file or directory"}},
		{"missing key file", func(dir string) {
			writeChain(t, dir, "a.pem", leaf, inter)
		}, []string{"Invalid certificate", "a.key: no such file or directory"}},
		{"both files missing", func(dir string) {}, []string{"a.pem: no such file or directory", "a.key: no such file or directory"}},
		{"mismatched key", func(dir string) {
			writeChain(t, dir, "a.pem", leaf, inter)
			writeKey(t, dir, "a.key", other, 0o600)
		}, []string{"a.key:1 does not match the certificate in ", "a.pem:1 (CN=a.test)"}},
		{"intermediate first", func(dir string) {
			writeChain(t, dir, "a.pem", inter, leaf)
			writeKey(t, dir, "a.key", leaf, 0o600)
		}, []string{"matches certificate 2 of ", "not the first: the leaf certificate must come first",
			"certificate 1 (CN=Test Intermediate) is not issued by certificate 2 (CN=a.test"}},
		{"root before intermediate", func(dir string) {
			writeChain(t, dir, "a.pem", leaf, root, inter)
			writeKey(t, dir, "a.key", leaf, 0o600)
		}, []string{"certificate 1 (CN=a.test) is not issued by certificate 2 (CN=Test Root, line ", "its issuer is CN=Test Intermediate",
			"certificate 2 (CN=Test Root) is not issued by certificate 3"}},
		{"damaged PEM", func(dir string) {
			writeChain(t, dir, "a.pem", leaf)
			os.WriteFile(filepath.Join(dir, "a.key"), []byte("\n-----BEGIN PRIVATE KEY-----\n!!\n-----END PRIVATE KEY-----\n"), 0o600)
		}, []string{"a.key:2: a PEM block that does not decode"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := readableTempDir(t)
			tc.setup(dir)
			src := tlsSource("", "a")
			_, err := Parse([]byte(src), "file.hcl", ParseOptions{BaseDir: dir})
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantError(t, src, err, append(tc.want, blockLine(src, "a"))...)
			// One diagnostic per problem, each at the block.
			if n := strings.Count(err.Error(), blockLine(src, "a")); n != strings.Count(err.Error(), "\n")+1 {
				t.Errorf("%d of the lines are at the block:\n%v", n, err)
			}
			// A reload's parse leaves the files to the supervisor.
			if _, err := Parse([]byte(src), "file.hcl", ParseOptions{BaseDir: dir, SkipCertificates: true}); err != nil {
				t.Errorf("with SkipCertificates: %v", err)
			}
		})
	}
}

// Broken certificates in two listeners are both reported, each at its
// block, together with the file's other errors.
func TestCertificateErrorsEveryListener(t *testing.T) {
	dir := readableTempDir(t)
	future := time.Now().Add(90 * 24 * time.Hour)
	a, b := newTestCert(t, "a.test", nil, false, future), newTestCert(t, "b.test", nil, false, future)
	writeChain(t, dir, "a.pem", a)
	writeKey(t, dir, "a.key", b, 0o600)
	writeKey(t, dir, "b.key", b, 0o600)
	src := tlsSource("workers {\n  count = 0\n}\n", "a", "b")
	_, err := Parse([]byte(src), "file.hcl", ParseOptions{BaseDir: dir})
	wantError(t, src, err, "file.hcl:2,", "workers.count",
		blockLine(src, "a")+"5-", "a.key:1 does not match the certificate",
		blockLine(src, "b")+"5-", "b.pem: no such file or directory")
	if n := strings.Count(err.Error(), "\n") + 1; n != 3 {
		t.Errorf("%d errors, want 3:\n%v", n, err)
	}
}

// A key only root can read is an error when the supervisor will read it
// again as its `user` on every reload, naming that account; it loads for a
// caller that reads as itself, and for a key the account may read.
func TestCertificateUnreadableForUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a file the supervisor's account cannot read")
	}
	dir := readableTempDir(t)
	future := time.Now().Add(90 * 24 * time.Hour)
	leaf := newTestCert(t, "a.test", nil, false, future)
	writeChain(t, dir, "a.pem", leaf)
	writeKey(t, dir, "a.key", leaf, 0o600) // root's
	src := tlsSource("user = \"nobody\"\n", "a")
	_, err := Parse([]byte(src), "file.hcl", ParseOptions{BaseDir: dir, KeysAsUser: true})
	wantError(t, src, err, blockLine(src, "a"), `certificate "a": reading as nobody (uid 65534, gid 65534): open `+filepath.Join(dir, "a.key")+": permission denied",
		"reads the files again on every reload")
	if strings.Contains(err.Error(), "a.pem") {
		t.Errorf("the readable certificate file is reported: %v", err)
	}
	if _, err := Parse([]byte(src), "file.hcl", ParseOptions{BaseDir: dir}); err != nil {
		t.Errorf("read as the caller (root): %v", err)
	}
	if err := os.Chown(filepath.Join(dir, "a.key"), 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := Parse([]byte(src), "file.hcl", ParseOptions{BaseDir: dir, KeysAsUser: true}); err != nil {
		t.Errorf("a key nobody owns: %v", err)
	}
	// The caller keeps its own credentials.
	if os.Geteuid() != 0 || os.Getegid() != 0 {
		t.Errorf("the caller's ids changed: %d:%d", os.Geteuid(), os.Getegid())
	}
	if _, err := os.ReadFile(filepath.Join(dir, "a.key")); err != nil {
		t.Errorf("root reads the key no more: %v", err)
	}
}

// An expired certificate loads, as nginx loads it, with a warning that
// names the block and says when, as a date and days.
func TestExpiredCertificateWarns(t *testing.T) {
	dir := readableTempDir(t)
	expired := time.Now().Add(-31*24*time.Hour - time.Hour)
	leaf := newTestCert(t, "old.test", nil, false, expired)
	writeChain(t, dir, "a.pem", leaf)
	writeKey(t, dir, "a.key", leaf, 0o600)
	src := tlsSource("", "a")
	cfg, err := Parse([]byte(src), "file.hcl", ParseOptions{BaseDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("expired %s (31 days ago)", expired.UTC().Format(time.DateOnly))
	if len(cfg.Warnings) != 1 || !strings.HasPrefix(cfg.Warnings[0], blockLine(src, "a")) ||
		!strings.Contains(cfg.Warnings[0], "warning: Expired certificate") || !strings.Contains(cfg.Warnings[0], want) {
		t.Errorf("warnings %q, want one at %s saying %q", cfg.Warnings, blockLine(src, "a"), want)
	}
	// With an error, the warning is listed too.
	src = tlsSource("workers {\n  count = 0\n}\n", "a")
	_, err = Parse([]byte(src), "file.hcl", ParseOptions{BaseDir: dir})
	wantError(t, src, err, "workers.count", "warning: Expired certificate", want)
}

// A damaged PEM block is reported at its own line, even when a good block
// follows it.
func TestReadPEMLines(t *testing.T) {
	dir := t.TempDir()
	c := newTestCert(t, "x.test", nil, false, time.Now().Add(time.Hour))
	writeChain(t, dir, "x.pem", c)
	good, _ := os.ReadFile(filepath.Join(dir, "x.pem"))
	path := filepath.Join(dir, "chain.pem")
	os.WriteFile(path, append(append(good, "\n-----BEGIN CERTIFICATE-----\nAAAA\n"...), good...), 0o600)
	line := strings.Count(string(good), "\n") + 2
	if _, err := readPEM(path, nil); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%s:%d:", path, line)) {
		t.Errorf("readPEM: %v, want line %d", err, line)
	}
	blocks, err := readPEM(filepath.Join(dir, "x.pem"), nil)
	if err != nil || len(blocks) != 1 || blocks[0].line != 1 {
		t.Errorf("a good file: %v %v", err, blocks)
	}
}

// parsePEM never panics, reports a line within the file, and returns blocks
// in order with increasing lines.
func FuzzParsePEM(f *testing.F) {
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))
	f.Add([]byte("junk\n-----BEGIN CERTIFICATE-----\n!!\n-----END CERTIFICATE-----\n-----BEGIN X-----\nAAAA\n-----END X-----\n"))
	f.Add([]byte("-----BEGIN PRIVATE KEY-----\nAAAA\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		blocks, err := parsePEM("f.pem", data)
		lines := 1 + strings.Count(string(data), "\n")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f.pem:") || len(blocks) != 0 {
				t.Fatalf("error %v with %d blocks", err, len(blocks))
			}
			return
		}
		last := 0
		for _, b := range blocks {
			if b.line < last || b.line > lines {
				t.Fatalf("block at line %d after %d, of %d lines", b.line, last, lines)
			}
			last = b.line
		}
	})
}

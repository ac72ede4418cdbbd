package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

// TestSlowloris runs scripts/slowloris.sh against the real gatehouse binary
// with its default workers and limits but for the per-client connection cap
// (raised to 4096): slowhttptest holds 1000 connections
// from 127.0.0.1 in slowloris (-H), slow body (-B) and slow read (-X) mode,
// 30 s each, while a client on 127.0.0.3 sends 500 sequential requests per
// mode. Every one of them must be answered. The script's report is logged.
//
// It needs slowhttptest (Debian package slowhttptest) and ss (iproute2, for
// the report only); without slowhttptest it skips.
func TestSlowloris(t *testing.T) {
	if testing.Short() {
		t.Skip("slowloris attack takes ~2 minutes; skipped with -short")
	}
	if _, err := exec.LookPath("slowhttptest"); err != nil {
		t.Skip("slowhttptest is not installed (Debian: apt-get install slowhttptest); skipping the slow-client attack test")
	}
	root := repoRoot(t)
	// The per-client cap is raised from 256 so that all 1000 attack
	// connections are admitted: the slow-client limits and the client share
	// are under test here, not admission.
	dir := writeConfig(t, `
limits {
  max_connections_per_client = 4096
}
route "/hello" {
  respond {
    body = "hello, world\n"
  }
}
`)
	// A 1 MiB file, so the slow-read attack's responses block on its window.
	if err := os.WriteFile(filepath.Join(dir, "www", "big.bin"), bytes.Repeat([]byte("x"), 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startBinary(t, dir, 0, "-config", "gatehouse.hcl")
	p.waitServing(t, "/hello")

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(root, "scripts", "slowloris.sh"),
		"-a", p.addr, "-c", "1000", "-l", "30", "-n", "500", "-m", "HBX",
		"-u", "/hello", "-x", "/big.bin", "-e", "hello, world\n")
	cmd.Dir = root
	cmd.WaitDelay = 10 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	began := time.Now()
	err := cmd.Run()
	t.Logf("scripts/slowloris.sh (%v):\n%s", time.Since(began).Round(time.Second), out.String())
	select {
	case <-p.exited:
		t.Fatalf("gatehouse exited during the attack: %v", p.err)
	default:
	}
	if err != nil {
		t.Fatalf("scripts/slowloris.sh: %v (the legitimate client was not answered every time, or the script failed)", err)
	}
	for _, mode := range []string{"slowloris", "slowbody", "slowread"} {
		if !regexp.MustCompile(`(?m)^` + mode + `\s+500/500 `).MatchString(out.String()) {
			t.Errorf("mode %s: no 500/500 line in the script's report", mode)
		}
	}
}

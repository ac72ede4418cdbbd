package supervisor

import (
	"errors"
	"strings"
	"testing"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/gatehouse-dev/gatehouse/ipc"
)

// TestCheckHelloCountsEverything: a file and htpasswd entries that each
// pass their own bound can still make a Hello too large for a frame; the
// check refuses that at start and reload instead of every worker failing.
func TestCheckHelloCountsEverything(t *testing.T) {
	users := func(n int) []config.HtpasswdUser {
		var us []config.HtpasswdUser
		for i := range n {
			us = append(us, config.HtpasswdUser{Name: strings.Repeat("u", 8) + string(rune('a'+i%26)), Hash: "$2y$05$" + strings.Repeat("h", 53)})
		}
		return us
	}
	w := config.Workers{Count: 4, Concurrency: 8}
	small := &config.Config{Source: []byte("route \"/\" {}\n"), Workers: w}
	if err := checkHello(small, nil); err != nil {
		t.Fatalf("small configuration refused: %v", err)
	}
	big := &config.Config{
		Workers: w,
		Source:  []byte(strings.Repeat("#\n", config.MaxSourceBytes/2-1)),
		Routes:  []config.Route{{Prefix: "/", BasicAuth: &config.BasicAuth{File: "/etc/htpasswd", Users: users(config.MaxHtpasswdBytes / 80)}}},
	}
	if len(big.Source) > config.MaxSourceBytes {
		t.Fatalf("test file of %d bytes is over the file bound", len(big.Source))
	}
	err := checkHello(big, nil)
	if !errors.Is(err, ErrHelloTooLarge) || !strings.Contains(err.Error(), "htpasswd") {
		t.Fatalf("error %v, want ErrHelloTooLarge naming what fills it", err)
	}
	// The frame a worker would get is what the check measured: over the cap.
	if _, err := ipc.Marshal(nil, helloFrame(0, big, nil, nil)); err == nil {
		t.Fatal("the refused Hello marshals within the frame cap: the check is stricter than the channel")
	}
}

package worker

import (
	"os"
	"testing"

	"github.com/gatehouse-dev/gatehouse/config"
	"golang.org/x/sys/unix"
)

// A worker keeps at most max_kept_connections plain copies, refuses more
// rather than dropping one, and gives each back once: to its Dispatch or to
// Forget, which closes it.
func TestKeptPlain(t *testing.T) {
	w := &Worker{setup: &setup{cfg: &config.Config{Workers: config.Workers{MaxKeptConnections: 2, TLSMaxIdleSessions: 2}}}}
	r, wr, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer wr.Close()
	fd := int(r.Fd())
	for id := uint64(1); id <= 3; id++ {
		if got, want := w.keepPlain(id, fd), id <= 2; got != want {
			t.Fatalf("keep %d = %v, want %v", id, got, want)
		}
	}
	k := w.unkeep(1)
	if k == nil || k.nc != nil || k.fd == fd {
		t.Fatalf("unkeep 1 = %+v, want its own bare copy", k)
	}
	unix.Close(k.fd)
	if w.unkeep(1) != nil {
		t.Fatal("taken twice")
	}
	// Room again: the cap counts what is kept now.
	if !w.keepPlain(3, fd) {
		t.Fatal("keep 3 refused under the cap")
	}
	k2 := w.kept.byID[2].fd
	w.forget(2)
	if _, err := unix.FcntlInt(uintptr(k2), unix.F_GETFD, 0); err != unix.EBADF {
		t.Errorf("Forget left the copy open (%v)", err)
	}
	if w.unkeep(2) != nil {
		t.Error("a forgotten copy is still kept")
	}
	w.forget(42) // not kept: ignored
	if k := w.unkeep(3); k == nil {
		t.Fatal("3 not kept")
	} else {
		unix.Close(k.fd)
	}
	if w.keptCount() != 0 {
		t.Errorf("keptCount %d, want 0 (plain copies do not count)", w.keptCount())
	}
}

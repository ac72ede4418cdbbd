package supervisor

import (
	"fmt"
	"net/netip"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/gatehouse-dev/gatehouse/supervisor/sockets"
)

// listener is one bound, non-blocking listening socket owned by the loop.
type listener struct {
	id      uint64 // stable across reloads; the poller token
	name    string
	fd      int
	cfgAddr netip.AddrPort // the address the configuration asked for
	addr    netip.AddrPort // the bound address (port filled in when 0 was asked)
}

// openListeners makes the listening sockets of cfg in configuration order,
// adopting those named in inherited (sockets.Open), and numbers them. Its
// errors are ErrBind.
func openListeners(cfg *config.Config, inherited map[string]int) ([]listener, error) {
	ls, err := sockets.Open(cfg.Listeners, inherited)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBind, err)
	}
	out := make([]listener, 0, len(ls))
	for i, l := range ls {
		out = append(out, listener{id: uint64(i), name: l.Name, fd: l.FD, cfgAddr: l.CfgAddr, addr: l.Addr})
	}
	return out, nil
}

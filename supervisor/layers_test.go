package supervisor

import (
	"strings"
	"testing"

	"github.com/gatehouse-dev/gatehouse/proto"
)

func TestReadyLayers(t *testing.T) {
	layer := func(name, detail string) *proto.SandboxLayer {
		return &proto.SandboxLayer{Name: name, Applied: detail == "", Detail: detail}
	}
	tests := []struct {
		in         []*proto.SandboxLayer
		bad        bool
		wantDetail string
	}{
		{in: []*proto.SandboxLayer{layer("chroot", ""), layer("pivot_root", ""), layer("landlock", "not supported")}, wantDetail: "not supported"},
		{in: []*proto.SandboxLayer{layer("seccomp", "a\r\x1b[31mb")}, wantDetail: `"a\r\x1b[31mb"`},
		{in: []*proto.SandboxLayer{layer("seccomp", strings.Repeat("x", 2000))}, wantDetail: strings.Repeat("x", maxLayerDetail)},
		{in: []*proto.SandboxLayer{layer("seccomp\x1b[2K", "")}, bad: true},
		{in: []*proto.SandboxLayer{layer("namespace/net", "")}, bad: true},
		{in: []*proto.SandboxLayer{layer("Seccomp", "")}, bad: true},
		{in: []*proto.SandboxLayer{layer("", "")}, bad: true},
		{in: []*proto.SandboxLayer{layer(strings.Repeat("a", maxLayerName+1), "")}, bad: true},
		{in: make([]*proto.SandboxLayer, maxReadyLayers+1), bad: true},
	}
	for i, tt := range tests {
		out, bad := readyLayers(tt.in)
		if (bad != "") != tt.bad {
			t.Errorf("%d: violation %q, want one: %v", i, bad, tt.bad)
			continue
		}
		if bad != "" {
			if strings.ContainsAny(bad, "\r\x1b") {
				t.Errorf("%d: the violation, which is logged, holds control bytes: %q", i, bad)
			}
			continue
		}
		if len(out) != len(tt.in) || out[len(out)-1].GetDetail() != tt.wantDetail {
			t.Errorf("%d: kept %v, want the last detail %q", i, out, tt.wantDetail)
		}
	}
}

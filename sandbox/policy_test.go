package sandbox_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/gatehouse-dev/gatehouse/sandbox"
)

func TestArgsRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		p    sandbox.Policy
	}{
		{"zero", sandbox.Policy{}},
		{"best-effort log", sandbox.Policy{}.BestEffort().WithSeccompAction(sandbox.Log)},
		{"roots", sandbox.Policy{}.WithRoots("/srv/www", "/srv/with space", "/srv/a=b,c")},
		{"user and chroot", sandbox.Policy{}.WithUser("www-data").WithChroot("/var/empty")},
		{"numeric user", sandbox.Policy{}.WithUser("1000:1000").WithRoots("/")},
		{"root descriptors", sandbox.Policy{}.WithRootFDs([]string{"/srv/a", "/srv/b"}, []int{4, 5})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.p.Args()
			for _, a := range args {
				if !sandbox.IsArg(a) {
					t.Errorf("IsArg(%q) = false, want true", a)
				}
			}
			got, err := sandbox.ParseArgs(args)
			if err != nil {
				t.Fatalf("ParseArgs(%q): %v", args, err)
			}
			if !reflect.DeepEqual(got, tt.p) {
				t.Errorf("ParseArgs(Args()) = %#v, want %#v", got, tt.p)
			}
		})
	}
}

func TestParseArgsErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"-sandbox.mode=lenient"}, "unknown mode"},
		{[]string{"-sandbox.seccomp=trap"}, "unknown seccomp action"},
		{[]string{"-sandbox.root=relative/dir"}, "not an absolute clean path"},
		{[]string{"-sandbox.root=/a/../b"}, "not an absolute clean path"},
		{[]string{"-sandbox.mode=strict", "-sandbox.mode=strict"}, "repeated"},
		{[]string{"-sandbox.colour=blue"}, "unknown argument"},
		{[]string{"-sandbox.mode"}, "malformed"},
		{[]string{"--verbose"}, "malformed"},
		{[]string{"-sandbox.root=/a", "-sandbox.root-fd=4", "-sandbox.root-fd=5"}, "2 root descriptors for 1 roots"},
		{[]string{"-sandbox.root=/a", "-sandbox.root-fd=2"}, "invalid root descriptor 2"},
		{[]string{"-sandbox.root=/a", "-sandbox.root=/b", "-sandbox.root-fd=4", "-sandbox.root-fd=4"}, "invalid root descriptor 4"},
		{[]string{"-sandbox.root=/a", "-sandbox.root-fd=x"}, "invalid syntax"},
	}
	for _, tt := range tests {
		_, err := sandbox.ParseArgs(tt.args)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseArgs(%q) = %v, want error containing %q", tt.args, err, tt.want)
		}
	}
}

func TestPolicyImmutable(t *testing.T) {
	roots := []string{"/a"}
	p := sandbox.Policy{}.WithRoots(roots...)
	roots[0] = "/b"
	q := p.WithMode(sandbox.BestEffort)
	q.Roots[0] = "/c"
	if p.Roots[0] != "/a" || p.Mode != sandbox.Strict {
		t.Errorf("policy changed through a copy: %+v", p)
	}
}

func TestNotAppliedError(t *testing.T) {
	err := error(&sandbox.NotAppliedError{Layers: []sandbox.Layer{{Name: "landlock", Detail: "kernel lacks Landlock"}}})
	if !errors.Is(err, sandbox.ErrNotSupported) {
		t.Errorf("errors.Is(%v, ErrNotSupported) = false", err)
	}
	for _, want := range []string{"landlock", "kernel lacks Landlock", `set sandbox { mode = "best-effort" }`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
}

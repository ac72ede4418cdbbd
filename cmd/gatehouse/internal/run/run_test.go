package run

import (
	"bytes"
	"strings"
	"testing"
)

func TestUsageExitStatus(t *testing.T) {
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-h"}, ExitOK, "-config"},
		{[]string{"-help"}, ExitOK, "-check"},
		{[]string{"--help"}, ExitOK, "-version"},
		{[]string{"-bogus"}, ExitConfig, "flag provided but not defined"},
		{[]string{"extra"}, ExitConfig, `unexpected argument "extra"`},
	}
	for _, tt := range tests {
		var out bytes.Buffer
		if code := Main(tt.args, &out); code != tt.code || !strings.Contains(out.String(), tt.want) {
			t.Errorf("gatehouse %v: exit %d, want %d; output %q lacks %q", tt.args, code, tt.code, out.String(), tt.want)
		}
	}
}

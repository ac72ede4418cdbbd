package config

import (
	"fmt"
	"strings"
	"testing"
)

// TestSourceTooLarge: a file the supervisor could not send its workers in
// Hello is refused, at the line where the limit falls.
func TestSourceTooLarge(t *testing.T) {
	line := "# " + strings.Repeat("x", 97) + "\n" // 100 bytes
	src := minimal + strings.Repeat(line, (MaxSourceBytes-len(minimal))/100)
	if _, err := parse(t, src); err != nil {
		t.Fatalf("a file of %d bytes: %v", len(src), err)
	}
	src += strings.Repeat(line, 10)
	_, err := parse(t, src)
	wantLine := 1 + strings.Count(src[:MaxSourceBytes], "\n")
	wantError(t, "(large file)", err, fmt.Sprintf("file.hcl:%d,1-1: Configuration too large; The file is %d bytes, over the 49152", wantLine, len(src)))
}

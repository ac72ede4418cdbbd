package supervisor

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestDesignStates checks docs/DESIGN.md §2.1 against the code: the states
// it describes and draws are stateNames (and closed), and the changes it
// lists are exactly those setState permits (moves).
func TestDesignStates(t *testing.T) {
	b, err := os.ReadFile("../docs/DESIGN.md")
	if err != nil {
		t.Fatal(err)
	}
	sec, ok := section(string(b), "### 2.1 States")
	if !ok {
		t.Fatal("docs/DESIGN.md has no section 2.1 States")
	}
	named := func(s string) connState {
		if s == "accept" {
			return stateNew
		}
		i := slices.Index(stateNames[:], s)
		if i < 0 {
			t.Errorf("DESIGN §2.1 names state %q, which the code does not have", s)
			return stateClosed
		}
		return connState(i)
	}
	code := append(stateNames[:], "closed")

	var described []string
	for _, m := range regexp.MustCompile(`(?m)^- \*\*([a-z_]+)\*\*:`).FindAllStringSubmatch(sec, -1) {
		described = append(described, m[1])
	}
	var drawn []string
	for _, m := range regexp.MustCompile(`│ ([a-z_]+) │`).FindAllStringSubmatch(sec, -1) {
		drawn = append(drawn, m[1])
	}
	slices.Sort(described)
	slices.Sort(drawn)
	slices.Sort(code)
	if !slices.Equal(described, code) {
		t.Errorf("DESIGN §2.1 describes states %v, the code has %v", described, code)
	}
	if want := slices.DeleteFunc(slices.Clone(code), func(s string) bool { return s == "closed" }); !slices.Equal(slices.Compact(drawn), want) {
		t.Errorf("DESIGN §2.1 draws states %v, the code has %v", slices.Compact(drawn), want)
	}

	var listed [stateNew + 1]stateSet
	rows := regexp.MustCompile("(?m)^\\| ([a-z_]+) \\| ([a-z_]+) \\| [^|]+ \\|$").FindAllStringSubmatch(sec, -1)
	if len(rows) < 2 {
		t.Fatal("DESIGN §2.1 lists no state changes")
	}
	for _, m := range rows[1:] { // the first is the header
		from, to := named(m[1]), named(m[2])
		if from == stateClosed || to == stateClosed || to == stateNew {
			continue
		}
		if listed[from]&(1<<to) != 0 {
			t.Errorf("DESIGN §2.1 lists %s → %s twice", m[1], m[2])
		}
		listed[from] |= 1 << to
	}
	for from := range listed {
		for to := range numStates {
			l, c := listed[from]&(1<<to) != 0, moves[from]&(1<<to) != 0
			if l != c {
				t.Errorf("%s → %s: listed in DESIGN §2.1 %v, permitted by setState %v", connState(from), to, l, c)
			}
		}
	}
}

// section returns the text of the markdown section headed by heading, up to
// the next heading of any level.
func section(doc, heading string) (string, bool) {
	_, rest, ok := strings.Cut(doc, "\n"+heading+"\n")
	if !ok {
		return "", false
	}
	if i := strings.Index(rest, "\n#"); i >= 0 {
		rest = rest[:i]
	}
	return rest, true
}

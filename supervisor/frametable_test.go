package supervisor

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// docRow renders r as the first seven columns of the documents' frame
// tables.
func docRow(r *frameRule) []string {
	id := "0"
	if r.request {
		id = "not 0"
	}
	var workers []string
	for s := workerStarting; s <= workerDead; s++ {
		if r.workers.has(s) {
			workers = append(workers, s.String())
		}
	}
	conn, rounds := "none", "-"
	if r.connID != nil {
		conn = "one it holds"
		var names []string
		for s := roundPool; s < roundStates; s++ {
			if r.rounds.has(s) {
				names = append(names, s.String())
			}
		}
		rounds = strings.Join(names, ", ")
	}
	return []string{r.name, id, strconv.Itoa(r.fds),
		strings.Join(workers, ", "), conn, rounds, r.repeat}
}

// docTable returns the rows of the frame table in the Markdown file at
// path: the table whose header starts "| frame | id | descriptors |", its
// first seven cells per row.
func docTable(t *testing.T, path string) [][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rows [][]string
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "| frame | id | descriptors |"):
			if in || rows != nil {
				t.Fatalf("%s: two frame tables", path)
			}
			in = true
		case in && strings.HasPrefix(line, "|---"):
		case in && strings.HasPrefix(line, "|"):
			cells := strings.Split(strings.Trim(line, "|"), "|")
			for i := range cells {
				cells[i] = strings.TrimSpace(cells[i])
			}
			if len(cells) < 7 {
				t.Fatalf("%s: a frame table row with %d cells: %q", path, len(cells), line)
			}
			rows = append(rows, cells[:7])
		default:
			in = false
		}
	}
	if rows == nil {
		t.Fatalf("%s: no frame table", path)
	}
	return rows
}

// TestFrameTableDocumented holds ipc/PROTOCOL.md's and docs/DESIGN.md's
// tables of what a worker may send to the frame table, row by row.
func TestFrameTableDocumented(t *testing.T) {
	var want [][]string
	for k := frameOther + 1; k < frameKinds; k++ {
		want = append(want, docRow(&frameTable[k]))
	}
	for _, path := range []string{"../ipc/PROTOCOL.md", "../docs/DESIGN.md"} {
		got := docTable(t, path)
		for i := 0; i < max(len(got), len(want)); i++ {
			switch {
			case i >= len(got):
				t.Errorf("%s: no row for %v", path, want[i])
			case i >= len(want):
				t.Errorf("%s: row %v is no frame of the table", path, got[i])
			case !slices.Equal(got[i], want[i]):
				t.Errorf("%s: row %d\n got  %q\n want %q", path, i+1, got[i], want[i])
			}
		}
	}
}

// TestFrameTableRows: every frame a worker may send has a row with a
// handler, its kind maps back to it, and the supervisor's own frames have
// none.
func TestFrameTableRows(t *testing.T) {
	for k := frameOther + 1; k < frameKinds; k++ {
		r := &frameTable[k]
		if r.name == "" || r.handle == nil || r.workers == 0 || r.repeat == "" {
			t.Errorf("row %d (%q) is incomplete", k, r.name)
		}
		if (r.connID == nil) != (r.rounds == 0) {
			t.Errorf("%s: a connection without round states, or round states without one", r.name)
		}
	}
	if frameTable[frameOther].handle != nil {
		t.Error("the row of frames a worker never sends has a handler")
	}
}

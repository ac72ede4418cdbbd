package supervisor

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/gatehouse-dev/gatehouse/ipc"
	"github.com/gatehouse-dev/gatehouse/proto"
)

// docRow renders r as the first seven columns of the documents' frame
// tables.
func docRow(r *frameRule) []string {
	id := "0"
	if r.request() {
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
	fds := "0"
	if r.MayCarry() {
		fds = r.Descriptors()
	}
	return []string{r.Name, id, fds,
		strings.Join(workers, ", "), conn, rounds, r.repeat}
}

// docTable returns the rows of the table in the Markdown file at path whose
// header starts with header, the first n cells of each.
func docTable(t *testing.T, path, header string, n int) [][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rows [][]string
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, header):
			if in || rows != nil {
				t.Fatalf("%s: two tables %q", path, header)
			}
			in = true
		case in && strings.HasPrefix(line, "|---"):
		case in && strings.HasPrefix(line, "|"):
			cells := strings.Split(strings.Trim(line, "|"), "|")
			for i := range cells {
				cells[i] = strings.TrimSpace(cells[i])
			}
			if len(cells) < n {
				t.Fatalf("%s: a row of %q with %d cells: %q", path, header, len(cells), line)
			}
			rows = append(rows, cells[:n])
		default:
			in = false
		}
	}
	if rows == nil {
		t.Fatalf("%s: no table %q", path, header)
	}
	return rows
}

// sameRows reports the differences between a document's rows and the
// table's.
func sameRows(t *testing.T, path string, got, want [][]string) {
	t.Helper()
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

// workerRows are the rows of the frames a worker sends, in the schema's
// order.
func workerRows() []*frameRule {
	var rows []*frameRule
	for _, s := range ipc.Specs() {
		if s.From == proto.Sender_SENDER_WORKER {
			rows = append(rows, &frameTable[s.Kind])
		}
	}
	return rows
}

// TestFrameTableDocumented holds ipc/PROTOCOL.md's table of what a worker
// may send to the frame table, row by row, and its table of every frame
// (name, sender, role, descriptors) to the whole table, the schema's
// declarations.
func TestFrameTableDocumented(t *testing.T) {
	var want [][]string
	for _, r := range workerRows() {
		want = append(want, docRow(r))
	}
	const path = "../ipc/PROTOCOL.md"
	sameRows(t, path, docTable(t, path, "| frame | id | descriptors |", 7), want)
	senders := map[proto.Sender]string{proto.Sender_SENDER_WORKER: "worker", proto.Sender_SENDER_SUPERVISOR: "supervisor"}
	roles := map[proto.Role]string{proto.Role_ROLE_NOTICE: "notice", proto.Role_ROLE_REQUEST: "request", proto.Role_ROLE_REPLY: "reply"}
	var all [][]string
	for _, s := range ipc.Specs() {
		all = append(all, []string{s.Name, senders[s.From], roles[s.Role], s.Descriptors()})
	}
	sameRows(t, path, docTable(t, path, "| frame | sender | role | descriptors |", 4), all)
}

// TestFrameTableRows: every frame a worker sends has a complete row with a
// handler and carries no descriptor (handlers take none), every row of
// workerFrames names one, and the supervisor's own frames have no handler.
func TestFrameTableRows(t *testing.T) {
	for name := range workerFrames {
		if s := ipc.SpecNamed(name); s == nil || s.From != proto.Sender_SENDER_WORKER {
			t.Errorf("workerFrames' row %q is no frame a worker sends", name)
		}
	}
	for _, s := range ipc.Specs() {
		r := &frameTable[s.Kind]
		if r.Spec != s {
			t.Errorf("%s: the row of kind %d is not its own", s.Name, s.Kind)
		}
		if s.From != proto.Sender_SENDER_WORKER {
			if r.handle != nil || r.workers != 0 {
				t.Errorf("%s, a frame the supervisor sends, is admitted from a worker", s.Name)
			}
			continue
		}
		if r.handle == nil || r.workers == 0 || r.repeat == "" {
			t.Errorf("row %s is incomplete", s.Name)
		}
		if (r.connID == nil) != (r.rounds == 0) {
			t.Errorf("%s: a connection without round states, or round states without one", s.Name)
		}
		if s.MayCarry() || s.Role == proto.Role_ROLE_REPLY {
			t.Errorf("%s: a worker frame with a descriptor or a reply, which no handler takes", s.Name)
		}
	}
}

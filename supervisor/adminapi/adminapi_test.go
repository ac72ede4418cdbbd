package adminapi

import (
	"encoding/json"
	"strings"
	"testing"
)

// A reply's list is present, maybe empty, for the command that names it, and
// absent from the others.
func TestReplyLists(t *testing.T) {
	tests := []struct {
		r        Reply
		has, not []string
	}{
		{Reply{OK: true, Workers: []Worker{}}, []string{`"workers":[]`}, []string{`"clients"`}},
		{Reply{OK: true, Clients: []Client{}}, []string{`"clients":[]`}, []string{`"workers"`}},
		{Reply{OK: true, Upstreams: []Upstream{}}, []string{`"upstreams":[]`}, []string{`"workers"`, `"clients"`}},
		{Reply{OK: true, Message: "ok"}, nil, []string{`"workers"`, `"clients"`, `"upstreams"`}},
		{Reply{OK: true, Status: &Status{Listeners: []string{}, Workers: []Worker{{Sandbox: []string{}}}}},
			[]string{`"listeners":[]`, `"workers":[{`, `"sandbox":[]`}, []string{`"clients"`}},
	}
	for _, tt := range tests {
		b, err := json.Marshal(tt.r)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range tt.has {
			if !strings.Contains(string(b), s) {
				t.Errorf("%s lacks %s", b, s)
			}
		}
		for _, s := range tt.not {
			if strings.Contains(string(b), s) {
				t.Errorf("%s has %s", b, s)
			}
		}
	}
}

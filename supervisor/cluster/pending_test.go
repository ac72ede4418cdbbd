package cluster

import (
	"slices"
	"testing"
	"time"
)

func TestPending(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := NewPending[string](5 * time.Millisecond)
	a := p.Add("a", t0)
	b := p.Add("b", t0.Add(time.Millisecond))
	c := p.Add("c", t0.Add(2*time.Millisecond))
	if got := p.Deadline(); !got.Equal(t0.Add(5 * time.Millisecond)) {
		t.Fatalf("Deadline = %v", got)
	}
	if v, ok := p.Take(a); !ok || v != "a" {
		t.Fatalf("Take(a) = %q, %v", v, ok)
	}
	if _, ok := p.Take(a); ok {
		t.Fatal("Take(a) twice")
	}
	// b's deadline now comes first: a's answered entry is skipped.
	if got := p.Deadline(); !got.Equal(t0.Add(6 * time.Millisecond)) {
		t.Fatalf("Deadline after Take = %v", got)
	}
	var expired []string
	p.Expire(t0.Add(6*time.Millisecond), func(v string) { expired = append(expired, v) })
	if !slices.Equal(expired, []string{"b"}) || p.Len() != 1 {
		t.Fatalf("expired %q, %d held", expired, p.Len())
	}
	if _, ok := p.Take(b); ok {
		t.Fatal("an expired entry was taken")
	}
	p.Expire(t0.Add(time.Hour), func(v string) { expired = append(expired, v) })
	if !slices.Equal(expired, []string{"b", "c"}) || p.Len() != 0 || !p.Deadline().IsZero() || len(p.queue) != 0 {
		t.Fatalf("expired %q, %d held, queue %d", expired, p.Len(), len(p.queue))
	}
	if _, ok := p.Take(c); ok {
		t.Error("an expired entry was taken")
	}
	// A long run of answered entries keeps the queue bounded.
	for i := range 10000 {
		p.Take(p.Add("x", t0.Add(time.Duration(i))))
		p.Deadline()
	}
	if len(p.queue) > 2 {
		t.Errorf("queue holds %d entries after every one was answered", len(p.queue))
	}
}

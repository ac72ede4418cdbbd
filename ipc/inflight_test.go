package ipc

import (
	"context"
	"testing"
	"time"
)

func TestInFlightCap(t *testing.T) {
	f := NewInFlight(2)
	if f.Cap() != 2 {
		t.Fatalf("Cap = %d, want 2", f.Cap())
	}
	for i := 0; i < 2; i++ {
		if err := f.TryAcquire(); err != nil {
			t.Fatalf("TryAcquire %d: %v", i, err)
		}
	}
	if err := f.TryAcquire(); err != ErrChannelFull {
		t.Fatalf("TryAcquire over the cap = %v, want ErrChannelFull", err)
	}
	if f.InUse() != 2 {
		t.Fatalf("InUse = %d, want 2", f.InUse())
	}

	// Acquire waits for a release rather than exceed the cap.
	got := make(chan error, 1)
	go func() { got <- f.Acquire(context.Background()) }()
	select {
	case err := <-got:
		t.Fatalf("Acquire returned %v with no slot free", err)
	case <-time.After(50 * time.Millisecond):
	}
	f.Release()
	if err := <-got; err != nil {
		t.Fatalf("Acquire after a release: %v", err)
	}
	if f.InUse() != 2 {
		t.Fatalf("InUse = %d, want 2", f.InUse())
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := f.Acquire(ctx); err != context.Canceled {
		t.Fatalf("Acquire with a done context = %v, want context.Canceled", err)
	}
	f.Release()
	f.Release()
	defer func() {
		if recover() == nil {
			t.Fatal("releasing more than was taken did not panic")
		}
	}()
	f.Release()
}

func TestInFlightAtLeastOne(t *testing.T) {
	if c := NewInFlight(0).Cap(); c != 1 {
		t.Fatalf("NewInFlight(0).Cap() = %d, want 1", c)
	}
}

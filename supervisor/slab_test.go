package supervisor

import (
	"testing"
	"unsafe"
)

// TestConnRecordSize guards the parked connection's cost: its record (all
// of it, in the slab) stays within 168 bytes, so 10 000 parked connections
// hold at most 1.68 MB of records.
func TestConnRecordSize(t *testing.T) {
	if n := unsafe.Sizeof(conn{}); n > 168 {
		t.Errorf("a connection record is %d bytes, over 168", n)
	}
}

// TestSlabChunkFitsPages: a chunk is allocated as whole pages (chunkBytes)
// and leaves no room in them for another record, so a record costs its own
// size and a byte of free list, not a page's leftover shared out.
func TestSlabChunkFitsPages(t *testing.T) {
	size, rec := unsafe.Sizeof(connChunk{}), unsafe.Sizeof(conn{})
	if chunkBytes%8192 != 0 {
		t.Fatalf("chunkBytes %d is not whole pages", chunkBytes)
	}
	if size > chunkBytes {
		t.Errorf("a chunk is %d bytes, over its %d", size, chunkBytes)
	}
	if size+rec+1 <= chunkBytes {
		t.Errorf("a chunk of %d bytes leaves room for another %d-byte record in %d: make chunkSize %d",
			size, rec, chunkBytes, (chunkBytes-8)/(rec+1))
	}
	if chunkSize > 256 {
		t.Errorf("chunkSize %d: a free slot's index is a byte", chunkSize)
	}
	if per := float64(chunkBytes) / chunkSize; per > float64(rec)+2 {
		t.Errorf("a record costs %.1f bytes of its chunk, its size is %d", per, rec)
	}
}

func TestSlabIDs(t *testing.T) {
	var s connSlab
	seen := map[uint64]bool{}
	var live []*conn
	for i := 0; i < 3*chunkSize; i++ {
		c := s.alloc()
		if c.id == 0 || seen[c.id] {
			t.Fatalf("id %d given out twice or zero", c.id)
		}
		seen[c.id] = true
		live = append(live, c)
	}
	if s.len() != 3*chunkSize || len(s.chunks) != 3 {
		t.Fatalf("%d records in %d chunks", s.len(), len(s.chunks))
	}
	old := live[5]
	oldID := old.id
	old.carried = []byte("x")
	s.release(old)
	if s.get(oldID) != nil || old.carried != nil {
		t.Fatal("a released record is still found, or keeps its buffer")
	}
	// The lowest free slot is reused, under a new id.
	c := s.alloc()
	if c != old || c.id == oldID || seen[c.id] || s.get(c.id) != c {
		t.Fatalf("reused slot %p id %d (old %p id %d)", c, c.id, old, oldID)
	}
	if s.get(424242) != nil || s.get(0) != nil || s.get(live[7].id+1<<connSlotBits) != nil {
		t.Fatal("an id never given out finds a record")
	}
	n := 0
	for range s.all() {
		n++
	}
	if n != s.len() {
		t.Fatalf("all yields %d records, %d live", n, s.len())
	}
}

// TestSlabShrinks: after a burst the records are released and the chunks
// that held them freed, so the supervisor keeps no memory for connections it
// no longer has; one chunk stays.
func TestSlabShrinks(t *testing.T) {
	var s connSlab
	var live []*conn
	for i := 0; i < 10*chunkSize; i++ {
		live = append(live, s.alloc())
	}
	// Released in accept order, as idle connections time out.
	for _, c := range live {
		s.release(c)
	}
	if s.len() != 0 || len(s.chunks) != 1 {
		t.Fatalf("%d records and %d chunks left after every release", s.len(), len(s.chunks))
	}
	// Newcomers fill the lowest chunk first.
	for i := 0; i < chunkSize; i++ {
		if c := s.alloc(); int(c.id&connSlotMask) >= chunkSize {
			t.Fatalf("slot %d taken while chunk 0 has room", c.id&connSlotMask)
		}
	}
	if len(s.chunks) != 1 {
		t.Fatalf("%d chunks for %d records", len(s.chunks), chunkSize)
	}
}

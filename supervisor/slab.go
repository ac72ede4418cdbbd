package supervisor

import "iter"

// Connection ids: the low connSlotBits bits are the record's slot in the slab,
// the high bits a sequence number, so an id finds its record without a map
// and is not reused before 2^34 more connections have been accepted. Ids
// fit in a poller token (below kindShift).
const (
	connSlotBits = 22
	connSlotMask = 1<<connSlotBits - 1
	seqLimit     = 1 << (kindShift - connSlotBits)
	// chunkBytes is what one chunk is allocated as: whole pages, since the
	// Go runtime gives an object over 32 KiB whole 8 KiB pages. A chunk of
	// 256 records of 168 bytes (43 272 bytes) took six pages, 192 bytes a
	// record; five pages hold as many records as fit, so a parked
	// connection costs its record and one byte (TestSlabChunkFitsPages).
	chunkBytes = 5 << 13
	// chunkSize is how many records a chunk holds: as many as fit in
	// chunkBytes beside their free list and its count, for a record of
	// 168 bytes. At most 256, as a free slot's index is a byte.
	chunkSize = 242
)

// connSlab holds the connection records, in chunks that never move, so a
// *conn stays valid for the record's life. A record is taken from the lowest
// chunk with room, so live records gather in the low chunks and the high ones
// empty after a burst; an empty last chunk is freed. A released record keeps
// its fields (as a closed record always did, for a caller still holding it)
// but not its buffers, until an accept reuses its slot. Owned by the
// dispatcher loop.
type connSlab struct {
	chunks []*connChunk
	room   int    // no chunk below this index has a free slot
	n      int    // records in use
	seq    uint64 // the last sequence number given out
}

type connChunk struct {
	recs  [chunkSize]conn
	free  [chunkSize]uint8 // free[:nfree] are the free slots' indexes; chunkSize <= 256
	nfree int
}

func newChunk() *connChunk {
	ch := &connChunk{nfree: chunkSize}
	for i := range ch.free {
		ch.free[i] = uint8(chunkSize - 1 - i)
	}
	return ch
}

// alloc returns a zeroed record with a fresh id, or nil when every slot a
// connection id can name is taken.
func (s *connSlab) alloc() *conn {
	for s.room < len(s.chunks) && s.chunks[s.room].nfree == 0 {
		s.room++
	}
	if s.room == len(s.chunks) {
		if (len(s.chunks)+1)*chunkSize > connSlotMask+1 {
			return nil
		}
		s.chunks = append(s.chunks, newChunk())
	}
	ch := s.chunks[s.room]
	ch.nfree--
	i := ch.free[ch.nfree]
	s.seq = (s.seq + 1) % seqLimit
	if s.seq == 0 {
		s.seq = 1 // id 0 marks a free record
	}
	c := &ch.recs[i]
	*c = conn{id: s.seq<<connSlotBits | uint64(s.room*chunkSize+int(i)), state: stateNew}
	s.n++
	return c
}

// get returns the live record with id, or nil.
func (s *connSlab) get(id uint64) *conn {
	slot := int(id & connSlotMask)
	if id == 0 || slot >= len(s.chunks)*chunkSize {
		return nil
	}
	c := &s.chunks[slot/chunkSize].recs[slot%chunkSize]
	if c.id != id {
		return nil
	}
	return c
}

// at returns the record a link names (live or not), or nil for none.
func (s *connSlab) at(l link) *conn {
	if l == 0 {
		return nil
	}
	i := int(l - 1)
	return &s.chunks[i/chunkSize].recs[i%chunkSize]
}

// release frees c's slot and drops its buffers. Once the last chunk is empty
// while the one below it is at most half full, the last chunk goes: a count
// that hovers at a chunk's boundary does not allocate one on every accept.
func (s *connSlab) release(c *conn) {
	slot := int(c.id & connSlotMask)
	c.id, c.carried, c.hd = 0, nil, nil
	k := slot / chunkSize
	ch := s.chunks[k]
	ch.free[ch.nfree] = uint8(slot % chunkSize)
	ch.nfree++
	s.n--
	s.room = min(s.room, k)
	for n := len(s.chunks); n >= 2 && s.chunks[n-1].nfree == chunkSize && s.chunks[n-2].nfree >= chunkSize/2; n-- {
		s.chunks[n-1] = nil
		s.chunks = s.chunks[:n-1]
	}
	s.room = min(s.room, len(s.chunks))
}

// len is the number of live records.
func (s *connSlab) len() int { return s.n }

// all yields every live record. A record released meanwhile is skipped.
func (s *connSlab) all() iter.Seq[*conn] {
	return func(yield func(*conn) bool) {
		for k := 0; k < len(s.chunks); k++ {
			ch := s.chunks[k]
			for i := range ch.recs {
				if c := &ch.recs[i]; c.id != 0 && !yield(c) {
					return
				}
			}
		}
	}
}

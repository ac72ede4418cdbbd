package cluster

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/redis/go-redis/v9"
)

// Shared TLS session ticket keys. One instance at a time holds a lease in
// the store (SET NX PX, renewed every health check) and is the only one
// that rotates: once an hour it writes a new key beside the current one,
// and the write is fenced by the lease in the same script, so an instance
// that lost its lease writes nothing. Every instance reads the keys every
// health check and passes them to its loop, which hands them to its
// workers as it hands them its own today; a ticket issued by any instance
// then resumes on every other.
//
// A new key is written to take over only promoteDelay later: until then
// every instance gives it to its workers second, to decrypt tickets only,
// so no instance issues a ticket with it before all have read it.
//
// At rest in the store the keys are sealed with AES-256-GCM under a key
// derived (HKDF-SHA256) from cluster.secret_file, bound to the key's name,
// so reading the store (a backup, a replica, a MONITOR, another tenant of
// a shared server) yields nothing that decrypts a ticket, and a blob
// written by anyone without the secret is refused. The supervisor holds
// the keys in memory, as it holds its own today; they are never logged;
// workers get the two they need to serve TLS, as today, and never reach
// the store.

// Timings of ticket custody. A key encrypts new tickets for ticketRotation
// and decrypts them for as long again, as the keys each instance makes
// alone do.
const (
	ticketRotation = time.Hour
	promoteDelay   = 5 * time.Second
	leaseTTL       = 10 * time.Second
	ticketKeyBytes = 32
	sealedVersion  = 1
)

// TicketKeys are the shared session ticket keys, posted to the loop when
// they change: the one that encrypts new tickets first, then the one
// still accepted.
type TicketKeys struct {
	Keys [][]byte
}

// leaseScript takes or renews the rotation lease for ARGV[1].
var leaseScript = redis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
`)

// fencedSet writes KEYS[2] only while ARGV[1] holds the lease KEYS[1].
var fencedSet = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[2], ARGV[2])
return 1
`)

// ticketCustody is the shared keys' state on one instance; used only by
// the monitor goroutine.
type ticketCustody struct {
	aead cipher.AEAD
	// blob is the sealed set last read, set its contents.
	blob []byte
	set  *ticketSet
	// posted is the order of keys last posted to the loop.
	posted [][]byte
	// badBlob is a blob that did not open, logged once.
	badBlob []byte
}

// ticketSet is the keys in the store: the newest first, and when it takes
// over (encrypts new tickets).
type ticketSet struct {
	activeFrom time.Time
	keys       [][]byte
}

func newTicketCustody(cfg *config.Cluster) (*ticketCustody, error) {
	secret, err := os.ReadFile(cfg.SecretFile)
	if err != nil {
		return nil, fmt.Errorf("cluster.secret_file: %w", err)
	}
	secret = bytes.TrimRight(secret, "\r\n")
	defer clear(secret)
	if len(secret) < config.MinClusterSecret {
		return nil, fmt.Errorf("cluster.secret_file %q holds %d bytes, fewer than %d", cfg.SecretFile, len(secret), config.MinClusterSecret)
	}
	key, err := hkdf.Key(sha256.New, secret, nil, "gatehouse cluster session ticket keys v1", 32)
	if err != nil {
		return nil, err
	}
	defer clear(key)
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &ticketCustody{aead: aead}, nil
}

// tick renews or takes the lease, rotates if this instance holds it and the
// keys are due, reads them, and posts them if what the loop should hand
// its workers changed. An error from the store itself is returned; one of
// the keys' (a blob that does not open) is logged once and read as none.
func (t *ticketCustody) tick(ctx context.Context, s *Store) error {
	leaseKey, keysKey := s.key("tickets:lease"), s.key("tickets")
	held, err := leaseScript.Run(ctx, s.rdb, []string{leaseKey}, s.cfg.Instance, leaseTTL.Milliseconds()).Bool()
	if err != nil {
		return err
	}
	blob, err := s.rdb.Get(ctx, keysKey).Bytes()
	if err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	if !bytes.Equal(blob, t.blob) {
		t.blob, t.set = blob, nil
		if len(blob) > 0 {
			set, err := t.open(blob, keysKey)
			if err != nil && !bytes.Equal(blob, t.badBlob) {
				t.badBlob = bytes.Clone(blob)
				s.log.Error("the shared session ticket keys in the store do not open: is cluster.secret_file the same on every instance?", "error", err)
			}
			t.set = set
		}
	}
	now := time.Now()
	if held && (t.set == nil || !now.Before(t.set.activeFrom.Add(ticketRotation))) {
		next := &ticketSet{activeFrom: now, keys: [][]byte{make([]byte, ticketKeyBytes)}}
		rand.Read(next.keys[0])
		if t.set != nil {
			// Every instance has read the current key: the new one
			// takes over once every instance has read it too.
			next.activeFrom = now.Add(promoteDelay)
			next.keys = append(next.keys, t.set.keys[0])
		}
		blob := t.seal(next, keysKey)
		ok, err := fencedSet.Run(ctx, s.rdb, []string{leaseKey, keysKey}, s.cfg.Instance, blob).Bool()
		if err != nil {
			return err
		}
		if ok {
			t.blob, t.set = blob, next
			s.log.Info("rotated the shared session ticket keys", "takes_over", next.activeFrom.Format(time.RFC3339))
		}
	}
	if t.set == nil {
		return nil
	}
	keys := t.set.keys
	if now.Before(t.set.activeFrom) && len(keys) == 2 {
		keys = [][]byte{keys[1], keys[0]}
	}
	if !sameKeys(keys, t.posted) {
		t.posted = keys
		s.post(TicketKeys{Keys: keys})
	}
	return nil
}

// seal is set sealed for the store under name: a random nonce, then the
// version, the take-over time (Unix ms) and the keys, encrypted and
// authenticated with name as additional data.
func (t *ticketCustody) seal(set *ticketSet, name string) []byte {
	plain := make([]byte, 0, 1+8+len(set.keys)*ticketKeyBytes)
	plain = append(plain, sealedVersion)
	plain = binary.BigEndian.AppendUint64(plain, uint64(set.activeFrom.UnixMilli()))
	for _, k := range set.keys {
		plain = append(plain, k...)
	}
	defer clear(plain)
	nonce := make([]byte, t.aead.NonceSize(), t.aead.NonceSize()+len(plain)+t.aead.Overhead())
	rand.Read(nonce)
	return t.aead.Seal(nonce, nonce, plain, []byte(name))
}

// open is the set sealed in blob under name.
func (t *ticketCustody) open(blob []byte, name string) (*ticketSet, error) {
	n := t.aead.NonceSize()
	if len(blob) < n {
		return nil, errors.New("too short")
	}
	plain, err := t.aead.Open(nil, blob[:n], blob[n:], []byte(name))
	if err != nil {
		return nil, err
	}
	if len(plain) < 9 || plain[0] != sealedVersion || (len(plain)-9)%ticketKeyBytes != 0 || len(plain) == 9 || len(plain) > 9+2*ticketKeyBytes {
		return nil, errors.New("not a set of ticket keys")
	}
	set := &ticketSet{activeFrom: time.UnixMilli(int64(binary.BigEndian.Uint64(plain[1:9])))}
	for k := plain[9:]; len(k) > 0; k = k[ticketKeyBytes:] {
		set.keys = append(set.keys, k[:ticketKeyBytes:ticketKeyBytes])
	}
	return set, nil
}

func sameKeys(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

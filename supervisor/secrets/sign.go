package secrets

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"runtime"
	"slices"

	"github.com/gatehouse-dev/gatehouse/proto"
)

// Job is one admitted signature: the key the handshake's Grant names in the
// ring the worker was started with, and the Sign's digest and options.
type Job struct {
	key    crypto.Signer
	digest []byte
	opts   crypto.SignerOpts
}

// Job returns the signature m asks for under g, a Grant Check admitted for
// a worker started with k. The digest is m's, not a copy.
func (k *Ring) Job(g Grant, m *proto.Sign) Job {
	var opts crypto.SignerOpts = crypto.Hash(m.GetHash())
	if m.GetPss() {
		opts = &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthEqualsHash, Hash: crypto.Hash(m.GetHash())}
	}
	return Job{key: k.keys[g.keyID()], digest: m.GetDigest(), opts: opts}
}

// OnLoop reports whether j is to be signed on the loop: P-256, in about
// 20 µs, less than the hand-off of the connection it is for; a goroutine
// and the message back would cost the loop more than the signature.
func (j Job) OnLoop() bool {
	k, ok := j.key.(*ecdsa.PrivateKey)
	return ok && k.Curve == elliptic.P256()
}

// Sign signs j, the error in the reply.
func (j Job) Sign() *proto.SignReply {
	rep := &proto.SignReply{}
	sig, err := j.key.Sign(rand.Reader, j.digest, j.opts)
	if err != nil {
		rep.Error = err.Error()
	} else {
		rep.Signature = sig
	}
	return rep
}

// Pool computes off the loop the signatures slower than P-256's (P-384
// 0.4 ms, P-521 1.2 ms, RSA 2048 1 ms and more): a signature on the loop
// delays every connection, and 64 Sign frames in one wake-up would stall
// it for tens of milliseconds. Its goroutines, one per CPU, started at the
// first Queue, hand each signature to done with the tag it was queued
// with. The loop never blocks on it: a job the channel has no room for
// waits in a backlog, owned by the loop, bounded by the workers' in-flight
// slots (each job holds one). Its methods are the loop's alone.
type Pool[T any] struct {
	done    func(T, *proto.SignReply)
	jobs    chan poolJob[T]
	backlog []poolJob[T]
}

// poolJob is a Job queued with its tag.
type poolJob[T any] struct {
	job Job
	tag T
}

// poolQueue is the jobs channel's room.
const poolQueue = 64

// NewPool returns a pool whose goroutines hand each signature to done.
func NewPool[T any](done func(T, *proto.SignReply)) Pool[T] {
	return Pool[T]{done: done}
}

// Queue hands j to the pool, with tag for done.
func (p *Pool[T]) Queue(j Job, tag T) {
	if p.jobs == nil {
		p.jobs = make(chan poolJob[T], poolQueue)
		jobs, done := p.jobs, p.done
		for range runtime.GOMAXPROCS(0) {
			go func() {
				for j := range jobs {
					done(j.tag, j.job.Sign())
				}
			}()
		}
	}
	j.digest = slices.Clone(j.digest)
	pj := poolJob[T]{job: j, tag: tag}
	if len(p.backlog) > 0 {
		p.backlog = append(p.backlog, pj)
		return
	}
	select {
	case p.jobs <- pj:
	default:
		p.backlog = append(p.backlog, pj)
	}
}

// Feed moves the backlog into the pool's channel while it has room,
// dropping the jobs whose tag live refuses (their worker gone meanwhile).
func (p *Pool[T]) Feed(live func(T) bool) {
	for len(p.backlog) > 0 {
		j := p.backlog[0]
		if !live(j.tag) {
			p.backlog = p.backlog[1:]
			continue
		}
		select {
		case p.jobs <- j:
			p.backlog = p.backlog[1:]
		default:
			return
		}
	}
	p.backlog = nil
}

// Stop ends the pool's goroutines, once the loop has stopped queueing.
func (p *Pool[T]) Stop() {
	if p.jobs != nil {
		close(p.jobs)
	}
}

package publisher

import (
	"crypto/rand"
	"encoding/base32"
	"fmt"
	"maps"
	"math"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/keyorder/keyorder/ordering"
)

// Stamps (S12). Every keyed message carries its producer's ID and its
// number in the producer's sequence for its key ([ordering.Stamp]), so
// that a subscriber can tell a copy the service stored twice from a new
// message, and see the numbers that never arrived. A number is never
// given twice: a reused number would make a message look like a copy of
// an earlier one that failed to publish but was in fact stored, and the
// subscriber would ack it unrun.
//
// Two things would reuse numbers, and each gets a fresh start instead:
//
//   - A restart. A new process does not know the numbers the last one
//     reached, so each Publisher is a producer of its own: a random ID,
//     or WithProducerID's ID followed by "#" and a random incarnation.
//   - P7. A key with nothing in flight leaves no state behind, so a key's
//     counter cannot live for ever. Counters of idle keys are kept in a
//     bounded cache per shard; a key whose counter was dropped starts a
//     new one, in a new epoch: Seq = epoch<<32 | n, where the epoch comes
//     from a Publisher-wide count of the counters made, so a key's
//     numbers increase across its counters. When the epochs run out
//     (2^31 counters, so that Seq fits an int64), the Publisher takes a
//     new incarnation, hence a new producer ID, and starts the epochs
//     again.

// MaxProducerIDBytes is the longest ID [WithProducerID] takes: the stamp's
// producer ID, the ID followed by "#" and an incarnation of 26 characters,
// must fit [ordering.MaxProducerBytes].
const MaxProducerIDBytes = 101

// MaxProducerIDBytes is a literal, so that its documentation reads as a
// number; these fail to compile if it no longer leaves room for "#" and
// an incarnation within a stamp's producer ID.
var (
	_ [MaxProducerIDBytes + 1 + incarnationBytes - ordering.MaxProducerBytes]struct{}
	_ [ordering.MaxProducerBytes - MaxProducerIDBytes - 1 - incarnationBytes]struct{}
)

const (
	// incarnationBytes is the length of a random producer ID or
	// incarnation: 16 random bytes in unpadded base32.
	incarnationBytes = 26
	// maxEpoch is the last epoch of an incarnation, so that every Seq is
	// below 2^63 and fits the int64 columns of SQL databases.
	maxEpoch = math.MaxInt32
	// counterWindow bounds the counters kept for idle keys: up to twice
	// this many, the most recently idle, in two generations per shard. A
	// kept counter costs about 100 bytes (its map entry, and a copy of
	// its key).
	counterWindow = 8192
)

// WithoutStamps turns stamping off: messages are published without the
// [ordering.StampAttribute] attribute, and a caller may set it itself. The
// default stamps every keyed message.
func WithoutStamps() Option {
	return func(c *config) error {
		c.noStamps = true
		return nil
	}
}

// WithProducerID sets a stable name for the producer ID that stamps the
// messages: the ID of each Publisher is then id, "#", and a random
// incarnation of 26 characters (e.g. "orders-api#k3j..."), so that logs
// and a subscriber's store can tell which service published what, while
// each Publisher, and so each run of a process, remains a producer of its
// own, whose numbers no other can repeat. The default is a random ID of 26
// characters.
//
// A subscriber's checks (S12) do not span producers, and so do not span
// restarts: to apply each message once across them, keep the last applied
// Seq per key and producer in the store that holds the effects, as
// examples/inbox does.
//
// New returns an error matching [ErrInvalidConfig] if id is empty, longer
// than [MaxProducerIDBytes], or not valid UTF-8.
func WithProducerID(id string) Option {
	return func(c *config) error {
		switch {
		case id == "":
			return fmt.Errorf("%w: WithProducerID: empty ID", ErrInvalidConfig)
		case len(id) > MaxProducerIDBytes:
			return fmt.Errorf("%w: WithProducerID: %d bytes, limit %d", ErrInvalidConfig, len(id), MaxProducerIDBytes)
		case !utf8.ValidString(id):
			return fmt.Errorf("%w: WithProducerID: %q is not valid UTF-8", ErrInvalidConfig, id)
		}
		c.producerID = id
		return nil
	}
}

// WithStampKey signs every stamp the publisher writes with key, by
// [ordering.StampKeys]: the [ordering.SignatureAttribute] attribute, an
// HMAC-SHA256 over the message's ordering key, its stamp and its data,
// so that a subscriber holding the same key takes a stamp that anyone
// else wrote, or moved from another message, for no stamp at all (S12).
// The default signs nothing. Use 32 random bytes, shared with the
// subscribers and kept secret; the publisher copies key.
//
// A signature costs one HMAC-SHA256 over the message's data, and one
// attribute and [ordering.SignatureSize] bytes more against the service's
// limits (P6): a keyed message may then carry 98 headers of its own
// rather than 99. It has no effect [WithoutStamps], or on messages
// without an ordering key, which are not stamped.
//
// New returns an error matching [ErrInvalidConfig] and
// [ordering.ErrBadStampKey] if key is shorter than
// [ordering.MinStampKeyBytes].
func WithStampKey(key []byte) Option {
	return func(c *config) error {
		if len(key) < ordering.MinStampKeyBytes {
			return fmt.Errorf("%w: WithStampKey: %w: %d bytes, at least %d", ErrInvalidConfig, ordering.ErrBadStampKey, len(key), ordering.MinStampKeyBytes)
		}
		c.stampKey = key
		return nil
	}
}

// Producer returns the producer ID that stamps the messages published now,
// or "" if stamping is off ([WithoutStamps]). It changes only if the
// Publisher has made 2^31 key counters (see [ordering.Stamp], Epochs).
func (p *Publisher) Producer() string {
	if p.stamps == nil {
		return ""
	}
	p.stamps.mu.Lock()
	defer p.stamps.mu.Unlock()
	return p.stamps.producer
}

// stamper makes the key counters of a Publisher.
type stamper struct {
	id string // WithProducerID's, or "" for a random producer ID
	// bound is the most a stamp, and its signature if signed, add to a
	// message's encoded size, with the largest number: it is counted
	// against the service's limit before the number is known (P6).
	bound int
	// attrs is the number of attributes a stamp adds: the stamp's, and
	// the signature's if signed.
	attrs int
	// keys signs the stamps (WithStampKey); nil: unsigned.
	keys *ordering.StampKeys

	mu       sync.Mutex
	producer string // the current incarnation's producer ID; guarded by mu
	epoch    uint32 // the last epoch given; guarded by mu
}

func newStamper(id string) *stamper {
	s := &stamper{id: id, attrs: ordering.StampAttributes}
	s.reincarnate()
	s.bound = ordering.Stamp{Producer: s.producer, Seq: ordering.MakeSeq(maxEpoch, math.MaxUint32)}.Size()
	return s
}

// signWith makes s sign its stamps with key (WithStampKey), which then
// count one attribute and a signature's bytes more. s is new.
func (s *stamper) signWith(key []byte) error {
	k, err := ordering.NewStampKeys(key)
	if err != nil {
		return fmt.Errorf("%w: WithStampKey: %w", ErrInvalidConfig, err)
	}
	s.keys = k
	s.bound += ordering.SignatureSize
	s.attrs++
	return nil
}

var lowerBase32 = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// reincarnate starts a new incarnation: a new producer ID, whose epochs
// start again from 1. mu is held, or s is new.
func (s *stamper) reincarnate() {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails
	s.producer = lowerBase32.EncodeToString(b[:])
	if s.id != "" {
		s.producer = s.id + "#" + s.producer
	}
	s.epoch = 0
}

// A counter numbers the messages of one key. It lives in the key's queue
// while the key has messages outstanding, and in its shard's cache while the
// key is idle, until the cache drops it.
type counter struct {
	producer string // the incarnation it counts in
	epoch    uint32
	n        uint32 // the last number given in epoch
}

// newCounter returns a counter in a new epoch.
func (s *stamper) newCounter() counter {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.epoch == maxEpoch {
		s.reincarnate()
	}
	s.epoch++
	return counter{producer: s.producer, epoch: s.epoch}
}

// stamp writes the key's next number and its producer into r's attributes,
// a map of r's own with room for the stamp's attribute, and signs it if
// asked. The shard's mutex is held: numbers are given in the order the
// messages are queued, which is the order they are sent (P3).
func (p *Publisher) stamp(q *keyQueue, r *Result) {
	c := &q.counter
	if c.n == math.MaxUint32 {
		*c = p.stamps.newCounter()
	}
	c.n++
	st := ordering.Stamp{Producer: c.producer, Seq: ordering.MakeSeq(c.epoch, c.n)}
	st.Put(r.msg.Attributes)
	if k := p.stamps.keys; k != nil {
		k.Sign(r.msg.Attributes, r.msg.OrderingKey, st, r.msg.Data)
	}
}

// stamped reports whether a message of key is stamped.
func (p *Publisher) stamped(key string) bool { return p.stamps != nil && key != "" }

// isStampAttribute reports whether k names a stamp attribute, of either
// form. prepare refuses such a header on a message it stamps, in the loop
// that checks every attribute anyway, rather than with a lookup per form.
func isStampAttribute(k string) bool {
	switch k {
	case ordering.StampAttribute, ordering.ProducerAttribute, ordering.SeqAttribute, ordering.SignatureAttribute:
		return true
	}
	return false
}

// restamp prepares m, a failed message that Retry sends again, to be
// stamped anew: a failed message's number is never given again, since the
// service may have stored it, and the key's later messages may have been
// stored since (P5). The attribute map is copied, as the failed Result
// keeps the old one until Retry has sent.
func (p *Publisher) restamp(m *retried) {
	if p.stamped(m.key) {
		m.attrs = maps.Clone(m.attrs)
	}
}

// counters keeps the counters of a shard's idle keys, in two generations:
// a key's counter goes into cur when its queue is deleted, and is taken
// out, from either, when the key has a queue again. When cur is full, it
// becomes old, and the counters in old are dropped: a counter stays kept
// while fewer than window counters of the shard are kept after it, and at
// most 2×window are kept. Dropping a whole map, rather than entries, gives
// its memory back (P7). Guarded by the shard's mutex.
type counters struct {
	cur, old map[string]counter
}

// take returns key's kept counter, or a new one from s.
func (cs *counters) take(key string, s *stamper) counter {
	for _, m := range [...]map[string]counter{cs.cur, cs.old} {
		if c, ok := m[key]; ok {
			delete(m, key)
			return c
		}
	}
	return s.newCounter()
}

// keep keeps key's counter c, in a generation of at most window counters.
func (cs *counters) keep(key string, c counter, window int) {
	if window <= 0 {
		return
	}
	if len(cs.cur) >= window {
		cs.old, cs.cur = cs.cur, nil
	}
	if cs.cur == nil {
		cs.cur = make(map[string]counter)
	}
	// A copy, so that a key cut from a larger string does not keep it.
	cs.cur[strings.Clone(key)] = c
}

// len returns the number of counters kept.
func (cs *counters) len() int { return len(cs.cur) + len(cs.old) }

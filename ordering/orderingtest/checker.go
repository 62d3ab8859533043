package orderingtest

import "sync"

// A CheckerOption configures a Checker made by NewChecker.
type CheckerOption func(*Checker)

// AllowRedelivery checks a log in which a key may go back and repeat its
// tail, as Pub/Sub's deliveries do when a message of an ordered key is
// redelivered: the repeats are counted as duplicates but are not
// violations. A key's records may step to the next sequence or back to any
// earlier one; skipping ahead is out of order. Without it, every message
// must be recorded once, in increasing order, which is what a handler that
// discards redelivered messages (rule S6) must achieve.
func AllowRedelivery() CheckerOption {
	return func(c *Checker) { c.redelivery = true }
}

// A Checker checks a log of (key, sequence) records, such as the messages
// a handler processed or the deliveries a server made, for messages out of
// order, duplicated or missing, per key.
//
// Sequences count from 1 within each key, in publish order. Record each
// message as it is processed, from any goroutine, then read the Report:
//
//	var c orderingtest.Checker
//	c.Expect("acct-1", 3)
//	c.Record("acct-1", 1) // in the handler
//	...
//	if err := c.Report().Err(); err != nil { ... }
//
// The zero value is a strict Checker ready to use. It is safe for concurrent use; each call takes one mutex.
type Checker struct {
	mu         sync.Mutex
	redelivery bool
	keys       map[string]*keyLog
}

// NewChecker returns a Checker with the given options.
func NewChecker(opts ...CheckerOption) *Checker {
	c := &Checker{}
	for _, opt := range opts {
		opt(c)
	}
	return c
}

// keyLog is what the Checker knows of one key.
type keyLog struct {
	expected   int         // sequences 1..expected should appear; 0: unknown
	seen       map[int]int // records per sequence
	records    int
	last       int // the previous record's sequence
	max        int // the highest sequence recorded
	duplicates []int
	outOfOrder []int
	unexpected []int
}

func (c *Checker) key(key string) *keyLog {
	if c.keys == nil {
		c.keys = map[string]*keyLog{}
	}
	k := c.keys[key]
	if k == nil {
		k = &keyLog{seen: map[int]int{}}
		c.keys[key] = k
	}
	return k
}

// Expect declares that key should have exactly messages 1..n. Without it, a
// key's missing messages are the gaps below the highest one recorded.
func (c *Checker) Expect(key string, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.key(key).expected = n
}

// Record adds one record of message seq of key.
func (c *Checker) Record(key string, seq int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := c.key(key)
	k.records++
	switch {
	case seq < 1 || (k.expected > 0 && seq > k.expected):
		k.unexpected = append(k.unexpected, seq)
	case c.redelivery && seq > k.last+1:
		// A tail must be delivered whole: a step past the next message
		// skipped one.
		k.outOfOrder = append(k.outOfOrder, seq)
	case !c.redelivery && k.seen[seq] == 0 && seq < k.max:
		k.outOfOrder = append(k.outOfOrder, seq)
	}
	if k.seen[seq] > 0 {
		k.duplicates = append(k.duplicates, seq)
	}
	k.seen[seq]++
	k.last = seq
	k.max = max(k.max, seq)
}

// Report returns what has been recorded so far.
func (c *Checker) Report() Report {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := Report{Redelivery: c.redelivery}
	for name, k := range c.keys {
		kr := KeyReport{
			Key:        name,
			Records:    k.records,
			Expected:   k.expected,
			Duplicates: clone(k.duplicates),
			OutOfOrder: clone(k.outOfOrder),
			Unexpected: clone(k.unexpected),
			redelivery: c.redelivery,
		}
		upTo := k.expected
		if upTo == 0 {
			upTo = k.max
		}
		for seq := 1; seq <= upTo; seq++ {
			if k.seen[seq] == 0 {
				kr.Missing = append(kr.Missing, seq)
			}
		}
		r.Keys = append(r.Keys, kr)
		r.Records += k.records
	}
	r.sort()
	return r
}

func clone(s []int) []int {
	if len(s) == 0 {
		return nil
	}
	return append([]int(nil), s...)
}

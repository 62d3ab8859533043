package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/ordering/orderingtest"
)

// The restart probe: a consumer of an ordered subscription dies with
// messages outstanding, as a killed or crashed process does, and a new one
// starts: every key must go on. The service gives a dead stream's messages
// to another stream once their leases run out. Google's emulator never
// cleans up a stopped subscriber's stream: the keys that had messages
// outstanding on it stall, for good, with the official client alone and
// no keyorder code involved (8 of 20 keys came back after 90 s, emulator
// 0.8.20). A test of restarts or hand-overs on it cannot tell that from
// lost messages; ordering/orderingtest behaves as the service does.
//
// Its shape: restartKeys keys of three messages each. The first consumer,
// behind a Link, acks each key's first message and leaves the others
// outstanding; once it has every key's first, its connections are cut
// and its Receive returns without a nack. A second consumer, on a client
// of its own, must then get every key's last message within restartBound.
const (
	restartKeys = 20
	// restartLease is the first consumer's lease, the least the official
	// client takes (MaxDurationPerAckExtension), rather than its 60 s.
	restartLease = 10 * time.Second
)

// restartBound is how long the second consumer may take to see every key
// again: the first's lease, after which the service hands its messages
// on, and as much again for the round trips.
var restartBound = 2 * restartLease

// restart runs the probe. Its detail says how many keys came back.
func (c *checker) restart(ctx context.Context) (bool, string, error) {
	t, err := c.topic(ctx, nil)
	if err != nil {
		return false, "", err
	}
	s, err := c.sub(ctx, t, nil)
	if err != nil {
		return false, "", err
	}
	for i := range restartKeys {
		if err := c.publish(ctx, t, fmt.Sprintf("k%02d", i), "1", "2", "3"); err != nil {
			return false, "", err
		}
	}

	// The first consumer, on a client of its own behind a link.
	link, err := orderingtest.NewLink(c.addr)
	if err != nil {
		return false, "", err
	}
	defer link.Close()
	dead, err := harness.ConnectProject(ctx, link.Addr, c.client.Project())
	if err != nil {
		return false, "", err
	}
	sub1 := dead.Subscriber(s.Name)
	sub1.ReceiveSettings.MaxDurationPerAckExtension = restartLease
	sub1.ReceiveSettings.ShutdownOptions = &pubsub.ShutdownOptions{Timeout: 0} // return at once, nacking nothing
	// Its Receive returns at once, but the client stops its iterator
	// behind it, which waits until the messages left outstanding are
	// neither extended nor pending: with the default MaxExtension, an
	// hour, unless the closed client's stream fails first (a CI run: the
	// iterator still waiting 2 minutes after the test). The lease's
	// length bounds that wait.
	sub1.ReceiveSettings.MaxExtension = restartLease
	first := newKeySet()
	ctx1, stop := context.WithCancel(ctx)
	// Once it is stopped, the dead client is closed, as a process's death
	// closes its connections, so that its RPCs in flight end at once and
	// its Receive returns: Receive waits for an RPC of the client's that
	// was in flight at the cut, which the client retries until it gets
	// through (a run hung here for ten minutes on a ModifyAckDeadline,
	// with the link restored only after Receive), and a link restored at
	// the stop let the client's stream come back and extend its leases past
	// the test's end.
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		<-ctx1.Done()
		_ = dead.Close()
	}()
	err = sub1.Receive(ctx1, func(_ context.Context, m *pubsub.Message) {
		if string(m.Data) != "1" {
			return // outstanding, neither acked nor nacked, when it dies
		}
		m.Ack()
		if first.add(m.OrderingKey) == restartKeys {
			link.Cut()
			stop()
		}
	})
	stop()
	<-gone
	if n := first.len(); n < restartKeys {
		return false, fmt.Sprintf("the first Receive got %d of %d keys (%v)", n, restartKeys, err), nil
	}

	// The second consumer, as after a restart: every key's last message,
	// within the bound.
	client, err := c.connect(ctx)
	if err != nil {
		return false, "", err
	}
	defer client.Close()
	last := newKeySet()
	ctx2, stop2 := context.WithTimeout(ctx, restartBound)
	defer stop2()
	err = client.Subscriber(s.Name).Receive(ctx2, func(_ context.Context, m *pubsub.Message) {
		m.Ack()
		if string(m.Data) == "3" && last.add(m.OrderingKey) == restartKeys {
			stop2()
		}
	})
	if err != nil {
		return false, "", fmt.Errorf("the second Receive: %w", err)
	}
	n := last.len()
	if n < restartKeys {
		return false, fmt.Sprintf("after a consumer died, %d of %d keys came back within %v; the rest stall: test restarts and hand-overs on keyorder's fake", n, restartKeys, restartBound), nil
	}
	return true, fmt.Sprintf("after a consumer died, all %d keys came back", restartKeys), nil
}

// A keySet counts distinct keys, safely across handler goroutines.
type keySet struct {
	mu   sync.Mutex
	keys map[string]bool
}

func newKeySet() *keySet { return &keySet{keys: map[string]bool{}} }

// add adds key and returns how many keys the set holds.
func (s *keySet) add(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys[key] = true
	return len(s.keys)
}

func (s *keySet) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.keys)
}

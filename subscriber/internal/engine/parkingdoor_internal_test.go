package engine

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/ordering"
)

// TestParkedCopyRunsAsItsOriginal checks that a message copied for the
// parking topic (Copy) and taken back by a release (releasedDelivery),
// with parking's own attributes added on the way, is delivered as it
// first was: its stamp, the signature that goes with it, its attributes
// and publish time; and that the copy's attributes are its own.
func TestParkedCopyRunsAsItsOriginal(t *testing.T) {
	t.Parallel()
	published := time.Date(2026, 12, 2, 10, 0, 0, 123, time.UTC)
	for _, tc := range []struct {
		name  string
		attrs map[string]string
		sig   string // what the copy carries of the signature
	}{
		{"stamped and signed", map[string]string{"a": "1", ordering.StampAttribute: "0.7@p", ordering.SignatureAttribute: "sig"}, "sig"},
		{"stamped", map[string]string{"a": "1", ordering.StampAttribute: "0.7@p"}, ""},
		{"not stamped", map[string]string{"a": "1"}, ""},
		{"no attributes", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := &pubsub.Message{ID: "m1", OrderingKey: "k", Data: []byte("x"), Attributes: tc.attrs, PublishTime: published}
			j := newJob(context.Background(), m, nil)
			d := (&Engine{}).ParkingDoor()

			c := d.Copy(j)
			assert.Equal(t, "m1", c.ID)
			assert.Equal(t, "k", c.OrderingKey)
			assert.Equal(t, published, c.PublishTime)
			assert.NotContains(t, c.Attributes, ordering.Header, "the key travels as the ordering key (P2)")
			assert.Equal(t, tc.sig, c.Attributes[ordering.SignatureAttribute])
			if j.D.Seq != 0 {
				st, err := ordering.ParseStamp(c.Attributes)
				require.NoError(t, err)
				assert.Equal(t, ordering.Stamp{Producer: "p", Seq: 7}, st)
			}
			c.Attributes["keyorder-park-id"] = "park-1" // parking's, on the copy alone
			c.Attributes["keyorder-attempts"] = "3"
			assert.NotContains(t, j.Msg.Attributes, "keyorder-park-id")

			back := releasedDelivery(&pubsub.Message{ID: c.ID, OrderingKey: c.OrderingKey, Data: c.Data, Attributes: c.Attributes, PublishTime: c.PublishTime})
			assert.Equal(t, j.D, back)
		})
	}
}

// releaseProbe is a release's door (ReleaseDoor) that records what it is
// told.
type releaseProbe struct {
	ran, failed []string
	failErr     error
}

var (
	errRecorded     = errors.New("recorded")
	errProbeStopped = errors.New("stopped")
)

func (rp *releaseProbe) Ran(id string) error { rp.ran = append(rp.ran, id); return errRecorded }
func (rp *releaseProbe) FailedAgain(id string, err error) error {
	rp.failed, rp.failErr = append(rp.failed, id), err
	return err
}
func (rp *releaseProbe) Stopped() error { return errProbeStopped }

// parkingEngine returns an engine, without a server, that runs h, with
// parking, and the key events it tells.
func parkingEngine(t *testing.T, minBackoff time.Duration, h Handler) (*Engine, <-chan KeyEvent) {
	t.Helper()
	cfg := testConfig()
	cfg.MinBackoff, cfg.MaxBackoff = minBackoff, minBackoff
	events := make(chan KeyEvent, 10)
	cfg.OnKeyEvent = func(ev KeyEvent) { events <- ev }
	cfg.Logger = slog.New(slog.DiscardHandler)
	r, err := New(context.Background(), &cfg, Facts{Name: "projects/p/subscriptions/s", Ordered: true, Parks: true, Counts: &Counters{}}, h)
	require.NoError(t, err)
	t.Cleanup(func() {
		r.Obs.close()
		_ = r.pool.Stop(context.Background())
	})
	return r, events
}

// parked is a parked message as RunParked takes it.
func parked(id string) *pubsub.Message {
	return &pubsub.Message{ID: id, OrderingKey: "k", Data: []byte("x"), Attributes: map[string]string{"keyorder-park-id": "park-1"}}
}

// TestRunParked checks what RunParked makes of each end of a parked
// message's calls: run (counted released), run after a retry, failed for
// good again (the key told parked with it first), and the engine stopped
// or ctx ended while it waits for its next call.
func TestRunParked(t *testing.T) {
	t.Parallel()
	t.Run("ran", func(t *testing.T) {
		t.Parallel()
		var calls int
		r, _ := parkingEngine(t, time.Millisecond, func(_ context.Context, d *Delivery) error {
			calls++
			assert.Equal(t, Delivery{ID: "m1", Key: "k", Data: []byte("x"), Headers: map[string]string{ordering.Header: "k"}, Attempt: calls}, *d)
			if calls == 1 {
				return errors.New("once")
			}
			return nil
		})
		rp := &releaseProbe{}
		err := r.ParkingDoor().RunParked(context.Background(), parked("m1"), rp)
		require.ErrorIs(t, err, errRecorded, "Ran's error")
		assert.Equal(t, 2, calls)
		assert.Equal(t, []string{"m1"}, rp.ran)
		assert.Empty(t, rp.failed)
		assert.EqualValues(t, 1, r.sub.Counts.Released.Load())
	})
	t.Run("failed again", func(t *testing.T) {
		t.Parallel()
		bad := errors.New("bad")
		r, events := parkingEngine(t, time.Millisecond, func(context.Context, *Delivery) error { return &PermanentError{Err: bad} })
		rp := &releaseProbe{}
		err := r.ParkingDoor().RunParked(context.Background(), parked("m1"), rp)
		require.ErrorIs(t, err, bad, "FailedAgain's error")
		assert.Equal(t, []string{"m1"}, rp.failed)
		assert.Empty(t, rp.ran)
		assert.EqualValues(t, 0, r.sub.Counts.Released.Load())
		ev := <-events
		assert.Equal(t, KeyParked, ev.Kind)
		assert.Equal(t, "k", ev.Key)
		assert.Equal(t, "m1", ev.MessageID)
		assert.Equal(t, 1, ev.Attempt)
		assert.EqualError(t, ev.Err, rp.failErr.Error())
	})
	t.Run("stopped", func(t *testing.T) {
		t.Parallel()
		var r *Engine
		r, _ = parkingEngine(t, time.Hour, func(context.Context, *Delivery) error {
			close(r.stopping) // the wait for the next call ends with the engine
			return errors.New("failed")
		})
		rp := &releaseProbe{}
		assert.ErrorIs(t, r.ParkingDoor().RunParked(context.Background(), parked("m1"), rp), errProbeStopped)
		assert.ErrorIs(t, r.ParkingDoor().RunParked(context.Background(), parked("m2"), rp), errProbeStopped, "not run once stopped")
		assert.Empty(t, rp.ran)
		assert.Empty(t, rp.failed)
	})
	t.Run("ctx ended", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		r, _ := parkingEngine(t, time.Hour, func(context.Context, *Delivery) error {
			cancel()
			return errors.New("failed")
		})
		assert.ErrorIs(t, r.ParkingDoor().RunParked(ctx, parked("m1"), &releaseProbe{}), context.Canceled)
	})
}

// stubParking is a Parking whose Shutdown waits until it is given up on.
type stubParking struct {
	Parking
	gaveUp chan struct{}
}

func (p *stubParking) Shutdown() { <-p.gaveUp }

// TestAttachedParkingKeepsToTheDrain checks that an attached parking's
// Shutdown gets what is left of the drain timeout: then the handlers are
// cancelled and the parking given up on, and its Shutdown awaited still.
func TestAttachedParkingKeepsToTheDrain(t *testing.T) {
	t.Parallel()
	r, _ := parkingEngine(t, time.Millisecond, func(context.Context, *Delivery) error { return nil })
	r.Cfg.DrainTimeout = 50 * time.Millisecond
	p := &stubParking{gaveUp: make(chan struct{})}
	r.ParkingDoor().Attach(p, func() { close(p.gaveUp) })

	began := time.Now()
	r.Ending.begin(r.Cfg.DrainTimeout)
	defer r.Ending.end()
	r.park.Shutdown()
	assert.GreaterOrEqual(t, time.Since(began), 50*time.Millisecond)
	assert.Error(t, r.handlerCtx.Err(), "the handlers are cancelled")
}

// TestAttachedParkingDrainedInTime checks that a parking whose Shutdown
// ends within the drain timeout is not given up on, nor the handlers
// cancelled.
func TestAttachedParkingDrainedInTime(t *testing.T) {
	t.Parallel()
	r, _ := parkingEngine(t, time.Millisecond, func(context.Context, *Delivery) error { return nil })
	p := &stubParking{gaveUp: make(chan struct{})}
	close(p.gaveUp) // its Shutdown returns at once
	r.ParkingDoor().Attach(p, func() { t.Error("given up on within the drain timeout") })

	r.Ending.begin(time.Hour)
	defer r.Ending.end()
	r.park.Shutdown()
	assert.NoError(t, r.handlerCtx.Err(), "the handlers run on")
}

// flakyParking is a Parking that holds every key parked and whose first
// flight fails; it reports each flight on flights.
type flakyParking struct {
	flights chan int
	landed  chan struct{} // closed once the second flight has landed
	n       int           // flights so far; under the lane's shard mutex
}

func (p *flakyParking) Fence(time.Time) uint64     { return 0 }
func (p *flakyParking) ParkID(string) string       { return "park-1" }
func (p *flakyParking) Wait(uint64, func()) bool   { return false }
func (p *flakyParking) ReleasedLately(string) bool { return false }
func (p *flakyParking) Shutdown()                  {}
func (p *flakyParking) Fly(_ string, _ []*Job, _ string, _ *ParkCause, land func(parked bool, err error)) {
	p.n++
	p.flights <- p.n
	if p.n == 1 {
		go land(false, errors.New("publish failed"))
		return
	}
	go func() { land(true, nil); close(p.landed) }()
}

// TestFailedFlightFliesAgainSoon checks that a flight to the parking
// topic that failed flies again after the control log's backoff, not
// after WithBackoff's, which spaces a handler's calls and may be hours:
// the flight's failure is a publish's, and the key is held meanwhile.
func TestFailedFlightFliesAgainSoon(t *testing.T) {
	t.Parallel()
	r, _ := parkingEngine(t, time.Hour, func(context.Context, *Delivery) error { return nil })
	p := &flakyParking{flights: make(chan int, 2), landed: make(chan struct{})}
	r.ParkingDoor().Attach(p, func() {})

	r.Deliver(context.Background(), &pubsub.Message{ID: "m1", OrderingKey: "k", Data: []byte("x")})
	require.Equal(t, 1, <-p.flights)
	select {
	case n := <-p.flights:
		require.Equal(t, 2, n)
	case <-time.After(10 * time.Second):
		t.Fatal("the failed flight did not fly again within 10 s")
	}
	<-p.landed
	assert.EqualValues(t, 1, r.sub.Counts.Parked.Load())
}

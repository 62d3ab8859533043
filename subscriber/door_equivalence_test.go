package subscriber_test

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/internal/metrictest"
	"github.com/keyorder/keyorder/subscriber"
)

// A handlerScript is what the handler does on its n-th call of the one
// message a door runs.
type handlerScript struct {
	name    string
	call    func(n int) error
	forGood bool // the message fails for good: its key parks, or stays parked
}

var doorScripts = []handlerScript{
	{name: "succeeds", call: func(int) error { return nil }},
	{name: "fails twice", call: func(n int) error {
		if n <= 2 {
			return errInjected
		}
		return nil
	}},
	{name: "panics once", call: func(n int) error {
		if n == 1 {
			panic("injected panic")
		}
		return nil
	}},
	{name: "exits once", call: func(n int) error {
		if n == 1 {
			runtime.Goexit()
		}
		return nil
	}},
	{name: "fails for good", forGood: true, call: func(int) error { return subscriber.Permanent(errInjected) }},
}

// doorRun is what a door made of a script: the counts it moved, the key
// events it told and the warnings and errors it logged, the door's own
// left out: a release's unpark, and a request's end.
type doorRun struct {
	Retried, Failed, DeadLettered, Duplicates, Gaps int64
	Events                                          []string
	Logs                                            []string
}

// doorProbe runs scripts through one door. The handler runs the script for
// the data "k/1"; before the script starts (armed), k/1 fails for good, so
// that the doors that release have a parked key to run it from.
type doorProbe struct {
	armed  atomic.Bool
	calls  atomic.Int32
	script atomic.Pointer[handlerScript]
	events chan subscriber.KeyEvent
	logs   metrictest.Log
}

func newDoorProbe() *doorProbe { return &doorProbe{events: make(chan subscriber.KeyEvent, 64)} }

func (p *doorProbe) options() []subscriber.Option {
	return []subscriber.Option{
		subscriber.WithLogger(p.logs.Logger()), subscriber.WithMaxAttempts(3), fast,
		subscriber.WithParkingWait(100 * time.Millisecond), subscriber.WithRedeliveryWait(time.Minute),
		subscriber.WithKeyEvents(func(ev subscriber.KeyEvent) { p.events <- ev }),
	}
}

func (p *doorProbe) handler(_ context.Context, d *subscriber.Delivery) error {
	if string(d.Data) != "k/1" {
		return nil
	}
	if !p.armed.Load() {
		return subscriber.Permanent(errInjected)
	}
	return p.script.Load().call(int(p.calls.Add(1)))
}

// arm starts the script, and returns what is needed to tell what it did.
func (p *doorProbe) arm(t *testing.T, s *subscriber.Subscription, sc handlerScript) func() doorRun {
	for len(p.events) > 0 {
		<-p.events
	}
	before, logged := s.Stats(), len(p.logs.Records(t))
	p.script.Store(&sc)
	p.armed.Store(true)
	return func() doorRun {
		after := s.Stats()
		run := doorRun{
			Retried: after.Retried - before.Retried, Failed: after.Failed - before.Failed,
			DeadLettered: after.DeadLettered - before.DeadLettered, Duplicates: after.Duplicates - before.Duplicates,
			Gaps: after.Gaps - before.Gaps,
		}
	events:
		for {
			select {
			case ev := <-p.events:
				if ev.Kind != subscriber.KeyUnparked {
					run.Events = append(run.Events, ev.Kind.String())
				}
			default:
				break events
			}
		}
		for _, rec := range p.logs.Records(t)[logged:] {
			if rec["msg"] == "keyorder/subscriber: release request failed" {
				continue // the request's own end, told to the operator
			}
			if lvl := rec["level"]; lvl == "WARN" || lvl == "ERROR" {
				run.Logs = append(run.Logs, fmt.Sprint(lvl, " ", rec["msg"]))
			}
		}
		sort.Strings(run.Logs)
		return run
	}
}

// awaitEventKind waits for an event of kind among p's, and puts it back.
func (p *doorProbe) awaitEventKind(t *testing.T, kind subscriber.KeyEventKind) {
	t.Helper()
	ev := awaitEvent(t, p.events, kind)
	p.events <- ev
}

// TestDoorsAgree: the same handler script run through every door, a
// Receive's lane, a push endpoint, a Release in a running Receive and a
// release request carried out by one, gives the same Stats, key events
// and logs: the call path applies every consequence of its verdict, and a
// door only delivers it.
func TestDoorsAgree(t *testing.T) {
	t.Parallel()
	for _, sc := range doorScripts {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			runs := map[string]doorRun{
				"pull":    pullDoor(t, sc),
				"push":    pushDoorRun(t, sc),
				"release": releaseDoor(t, sc, false),
				"request": releaseDoor(t, sc, true),
			}
			for door, run := range runs {
				assert.Equal(t, runs["pull"], run, "%s differs from pull", door)
			}
			if sc.forGood {
				assert.EqualValues(t, 1, runs["pull"].Failed)
				assert.Contains(t, runs["pull"].Events, subscriber.KeyParked.String())
			}
		})
	}
}

// pullDoor runs sc on a Receive with parking: k/1 arrives armed.
func pullDoor(t *testing.T, sc handlerScript) doorRun {
	p := newDoorProbe()
	e := newParkEnv(t, nil, p.options()...)
	stop := start(t, e.sub, p.handler)
	done := p.arm(t, e.sub, sc)
	e.publishSeqs(t, "k", 1, 1)
	if sc.forGood {
		p.awaitEventKind(t, subscriber.KeyParked)
	} else {
		require.NoError(t, e.srv.WaitFor(testContext(t), func() bool { return e.srv.Stats(e.sub.Name()).Acked == 1 }))
	}
	stop()
	return done()
}

// pushDoorRun runs sc on a push endpoint with parking.
func pushDoorRun(t *testing.T, sc handlerScript) doorRun {
	p := newDoorProbe()
	topic, _ := names()
	e := newPushSub(t, append(p.options(), subscriber.WithParking("parked-"+topic))...)
	e.mux.Handle("/push", e.sub.PushHandler(p.handler))
	t.Cleanup(func() { require.NoError(t, e.sub.Close(context.Background())) })
	done := p.arm(t, e.sub, sc)
	e.publishSeqs(t, "k", 1, 1)
	if sc.forGood {
		p.awaitEventKind(t, subscriber.KeyParked)
	} else {
		require.NoError(t, e.srv.WaitFor(testContext(t), func() bool { return e.srv.Stats(e.sub.Name()).Acked == 1 }))
	}
	return done()
}

// releaseDoor parks k/1 on a Receive, then runs sc in its release: by
// Release in the Receive, or, with request, by a release request from an
// operator's Subscription that the Receive carries out.
func releaseDoor(t *testing.T, sc handlerScript, request bool) doorRun {
	p := newDoorProbe()
	e := newParkEnv(t, nil, p.options()...)
	stop := start(t, e.sub, p.handler)
	e.publishSeqs(t, "k", 1, 1)
	p.awaitEventKind(t, subscriber.KeyParked)
	done := p.arm(t, e.sub, sc)
	releaser := e.sub
	if request {
		releaser = e.reopen(t, harness.Client(t, e.srv.Addr))
	}
	err := releaser.Release(testContext(t), "k")
	if sc.forGood {
		require.ErrorIs(t, err, subscriber.ErrParkedAgain)
		p.awaitEventKind(t, subscriber.KeyParked)
	} else {
		require.NoError(t, err)
	}
	stop()
	return done()
}

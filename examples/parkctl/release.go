package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/keyorder/keyorder/subscriber"
)

// How release reports while it waits: it looks at the key every
// progressEvery and says what changed; while nothing does, it says how
// long it has waited every stillEvery. Variables, for the tests.
var (
	progressEvery = 2 * time.Second
	stillEvery    = 15 * time.Second
)

// release asks for a key's release and, unless -wait=false, waits for it.
func (c *command) release(ctx context.Context, args []string) int {
	key, code := c.oneArg("release", "key", args)
	if code != exitOK {
		return code
	}
	switch {
	case c.f.timeout <= 0:
		return c.usageError("release: -timeout %v: need more than 0 (-wait=false returns once the request is recorded)", c.f.timeout)
	case !c.f.wait && c.f.set["timeout"]:
		return c.usageError("release: -timeout with -wait=false: nothing waits")
	}
	ctx, cancel := context.WithTimeout(ctx, c.f.timeout)
	defer cancel()
	sub, closeAll, code := c.open(ctx, "release")
	if code != exitOK {
		return code
	}
	defer closeAll()
	if !c.f.wait {
		if err := sub.RequestRelease(ctx, key); err != nil {
			return c.fail("release of %s: %v", strconv.Quote(key), err)
		}
		fmt.Fprintf(c.out, "release of %s requested: a Receive of %s carries it out\n", strconv.Quote(key), sub.Name())
		return exitOK
	}
	done := make(chan error, 1)
	go func() { done <- sub.Release(ctx, key) }()
	return c.released(ctx, sub, key, c.watch(ctx, sub, key, done))
}

// watch reports how the release of key goes until done yields its
// outcome, which it returns.
func (c *command) watch(ctx context.Context, sub *subscriber.Subscription, key string, done <-chan error) error {
	start := time.Now()
	tick := time.NewTicker(progressEvery)
	defer tick.Stop()
	fmt.Fprintf(c.errOut, "parkctl: asking for the release of %s\n", strconv.Quote(key))
	var last string
	var said time.Time
	for {
		select {
		case err := <-done:
			return err
		case <-tick.C:
		}
		now, ok := c.progress(ctx, sub, key, start)
		if ok && (now != last || time.Since(said) >= stillEvery) {
			fmt.Fprintf(c.errOut, "parkctl: %s (%s so far)\n", now, time.Since(start).Round(time.Second))
			last, said = now, time.Now()
		}
	}
}

// progress says where the release of key stands, false if it cannot tell
// now (the ctx ended, or the release ended meanwhile).
func (c *command) progress(ctx context.Context, sub *subscriber.Subscription, key string, start time.Time) (string, bool) {
	keys, err := sub.Parked(ctx)
	if err != nil {
		return "", false
	}
	for _, k := range keys {
		switch {
		case k.Key != key:
		case k.Releasing:
			return fmt.Sprintf("claimed: a Receive of %s is running the release, %d messages left", sub.Name(), k.Messages), true
		case !k.ReleaseRequested.IsZero():
			s := fmt.Sprintf("request recorded by %s; waiting for a Receive of %s to claim it", inert(k.ReleaseRequestedBy), sub.Name())
			if time.Since(start) >= stillEvery {
				s += "; is a service receiving it running?"
			}
			return s, true
		}
	}
	return "", false
}

// released reports the outcome of the release of key and returns the
// exit status.
func (c *command) released(ctx context.Context, sub *subscriber.Subscription, key string, err error) int {
	switch {
	case err == nil:
		fmt.Fprintf(c.out, "released %s: its parked messages ran, in order, and it is unparked\n", strconv.Quote(key))
		return exitOK
	case errors.Is(err, subscriber.ErrParkedAgain):
		return c.fail("%v\nthe key stays parked; release it again once the cause is fixed", err)
	case ctx.Err() != nil:
		return c.fail("release of %s: not carried out within -timeout %v; the request stays recorded, for a Receive of %s to carry out (parkctl list shows it, parkctl withdraw withdraws it)",
			strconv.Quote(key), c.f.timeout, sub.Name())
	default:
		return c.fail("release of %s: %v", strconv.Quote(key), err)
	}
}

// withdraw withdraws the release request pending on a key.
func (c *command) withdraw(ctx context.Context, args []string) int {
	key, code := c.oneArg("withdraw", "key", args)
	if code != exitOK {
		return code
	}
	sub, closeAll, code := c.open(ctx, "withdraw")
	if code != exitOK {
		return code
	}
	defer closeAll()
	switch err := sub.WithdrawRelease(ctx, key); {
	case err == nil:
		fmt.Fprintf(c.out, "withdrew the release request on %s: it stays parked\n", strconv.Quote(key))
		return exitOK
	case errors.Is(err, subscriber.ErrReleasing):
		return c.fail("withdraw %s: a Receive is running its release, which cannot be withdrawn (%v)", strconv.Quote(key), err)
	default:
		return c.fail("withdraw %s: %v", strconv.Quote(key), err)
	}
}

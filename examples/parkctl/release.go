package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keyorder/keyorder/subscriber"
)

// How release reports while it waits: it looks at the key every
// progressEvery, each look bounded by -reach, and says what changed, or
// that the server cannot be reached; while nothing changes, it says so
// again every stillEvery, so that whoever watches at 3 a.m. sees it is
// alive. Variables, for the tests.
var (
	progressEvery = time.Second
	stillEvery    = 3 * time.Second
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
		switch err := sub.RequestRelease(ctx, key); {
		case errors.Is(err, subscriber.ErrReleased):
			return c.released(ctx, sub, key, err, time.Time{})
		case err != nil:
			return c.fail("release of %s: %v", strconv.Quote(key), err)
		}
		fmt.Fprintf(c.out, "release of %s requested: a Receive of %s carries it out\n", strconv.Quote(key), sub.Name())
		return exitOK
	}
	done := make(chan error, 1)
	go func() { done <- sub.Release(ctx, key) }()
	lost, err := c.watch(ctx, sub, key, done)
	return c.released(ctx, sub, key, err, lost)
}

// watch reports how the release of key goes until done yields its
// outcome, which it returns, after when the server stopped answering,
// zero if it answered last.
func (c *command) watch(ctx context.Context, sub *subscriber.Subscription, key string, done <-chan error) (time.Time, error) {
	start := time.Now()
	tick := time.NewTicker(progressEvery)
	defer tick.Stop()
	fmt.Fprintf(c.errOut, "parkctl: asking for the release of %s\n", strconv.Quote(key))
	var last string
	var said, lost time.Time
	for {
		select {
		case err := <-done:
			return lost, err
		case <-tick.C:
		}
		now, ok := c.progress(ctx, sub, key, start, &lost)
		if ok && (now != last || time.Since(said) >= stillEvery) {
			fmt.Fprintf(c.errOut, "parkctl: %s (%s so far)\n", now, time.Since(start).Round(time.Second))
			last, said = now, time.Now()
		}
	}
}

// progress says where the release of key stands, false if it cannot tell
// now (the ctx ended, or the release ended meanwhile). A look the server
// does not answer within -reach says so, and sets *lost to when the
// server was first found silent; one it answers clears it.
func (c *command) progress(ctx context.Context, sub *subscriber.Subscription, key string, start time.Time, lost *time.Time) (string, bool) {
	rctx, cancel := context.WithTimeout(ctx, c.f.reach)
	defer cancel()
	keys, err := sub.Parked(rctx)
	switch {
	case ctx.Err() != nil || timedOut(ctx):
		// The command's -timeout cut the look, not -reach: the server's
		// silence is not known. (The client may return its deadline's
		// error a moment before ctx's own timer marks ctx done.)
		return "", false
	case err != nil && (rctx.Err() != nil || unreachable(err)):
		if lost.IsZero() {
			*lost = time.Now()
		}
		return fmt.Sprintf("cannot reach the Pub/Sub server at %s: no answer within -reach %v, for %s now; still waiting, until -timeout %v",
			server(), c.f.reach, time.Since(*lost).Round(time.Second), c.f.timeout), true
	case err != nil:
		return "", false
	}
	*lost = time.Time{}
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

// timedOut reports whether ctx's deadline has passed, done or not yet.
func timedOut(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// unreachable reports whether err is the official client's for a server
// that does not answer.
func unreachable(err error) bool {
	code := status.Code(err)
	return code == codes.Unavailable || code == codes.DeadlineExceeded
}

// released reports the outcome of the release of key and returns the
// exit status; lost is when the server stopped answering, zero if it
// answered last.
func (c *command) released(ctx context.Context, sub *subscriber.Subscription, key string, err error, lost time.Time) int {
	switch {
	case err == nil:
		fmt.Fprintf(c.out, "released %s: its parked messages ran, in order, and it is unparked\n", strconv.Quote(key))
		return exitOK
	case errors.Is(err, subscriber.ErrReleased):
		// A request made earlier, by this command run twice or by another
		// operator, was carried out meanwhile. Nothing is left to release,
		// so this one cannot be: the status says that, the words why.
		return c.fail("release of %s: released already, by an earlier release: its parked messages ran and nothing of it is parked now (%v)", strconv.Quote(key), err)
	case errors.Is(err, subscriber.ErrParkedAgain):
		return c.fail("%v\nthe key stays parked; release it again once the cause is fixed", err)
	case errors.Is(err, subscriber.ErrWithdrawn):
		return c.fail("release of %s: the request was withdrawn (parkctl withdraw) before a Receive began it; the key stays parked", strconv.Quote(key))
	case ctx.Err() != nil && !lost.IsZero():
		return c.fail("release of %s: not known to be carried out within -timeout %v: the Pub/Sub server at %s has not answered for %s; the request stays recorded, for a Receive of %s to carry out, unless one did meanwhile (parkctl list shows which, once the server answers)",
			strconv.Quote(key), c.f.timeout, server(), time.Since(lost).Round(time.Second), sub.Name())
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

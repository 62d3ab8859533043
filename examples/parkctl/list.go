package main

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/keyorder/keyorder/subscriber"
)

// list prints the parked keys.
func (c *command) list(ctx context.Context, args []string) int {
	if len(args) > 0 {
		return c.usageError("list takes no arguments, not %q", args)
	}
	sub, closeAll, code := c.open(ctx, "list")
	if code != exitOK {
		return code
	}
	defer closeAll()
	keys, err := sub.Parked(ctx)
	if err != nil {
		return c.fail("list: %v", err)
	}
	if c.f.json {
		err = c.listJSON(keys)
	} else {
		err = c.listTable(sub.Name(), keys)
	}
	if err != nil {
		return c.fail("list: %v", err)
	}
	return exitOK
}

// listTable prints keys as a table, every field inert.
func (c *command) listTable(name string, keys []subscriber.ParkedKey) error {
	if len(keys) == 0 {
		_, err := fmt.Fprintf(c.out, "no key of %s is parked\n", name)
		return err
	}
	now := time.Now()
	w := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "KEY\tPARKED SINCE\tMESSAGES\tSTATE\tMESSAGE\tLAST ERROR")
	for _, k := range keys {
		fmt.Fprintf(w, "%s\t%s (%s ago)\t%d\t%s\t%s\t%s\n", inert(k.Key), k.Since.UTC().Format(time.RFC3339),
			now.Sub(k.Since).Round(time.Second), k.Messages, state(k, now), inert(k.MessageID), inert(k.LastError))
	}
	return w.Flush()
}

// state says where the release of k stands.
func state(k subscriber.ParkedKey, now time.Time) string {
	s := "parked"
	if k.Releasing {
		s = "releasing"
	}
	if !k.ReleaseRequested.IsZero() {
		s += fmt.Sprintf(", release requested %s ago by %s", now.Sub(k.ReleaseRequested).Round(time.Second), inert(k.ReleaseRequestedBy))
	}
	return s
}

// A listed is a parked key as list -json writes it.
type listed struct {
	Key                string     `json:"key"`
	ParkedSince        time.Time  `json:"parked_since"`
	Messages           int        `json:"messages"`
	Releasing          bool       `json:"releasing"`
	MessageID          string     `json:"message_id"`
	LastError          string     `json:"last_error"`
	ReleaseRequested   *time.Time `json:"release_requested,omitempty"`
	ReleaseRequestedBy string     `json:"release_requested_by,omitempty"`
}

// listJSON prints keys as JSON lines.
func (c *command) listJSON(keys []subscriber.ParkedKey) error {
	for _, k := range keys {
		l := listed{Key: k.Key, ParkedSince: k.Since.UTC(), Messages: k.Messages, Releasing: k.Releasing,
			MessageID: k.MessageID, LastError: k.LastError, ReleaseRequestedBy: k.ReleaseRequestedBy}
		if !k.ReleaseRequested.IsZero() {
			at := k.ReleaseRequested.UTC()
			l.ReleaseRequested = &at
		}
		data, err := json.Marshal(l)
		if err != nil {
			return err
		}
		if _, err := c.out.Write(append(inertJSON(data), '\n')); err != nil {
			return err
		}
	}
	return nil
}

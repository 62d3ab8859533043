package main

import (
	"context"
	"encoding/json"
	"flag"
	"maps"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/subscriber"
)

// A line is one message of a replay, as replay writes it.
type line struct {
	ID          string            `json:"id"`
	Key         string            `json:"key,omitempty"`
	PublishTime time.Time         `json:"publish_time"`
	Producer    string            `json:"producer,omitempty"`
	Seq         string            `json:"seq,omitempty"` // epoch.n
	Attributes  map[string]string `json:"attributes,omitempty"`
	Data        *string           `json:"data,omitempty"`        // valid UTF-8
	DataBase64  []byte            `json:"data_base64,omitempty"` // otherwise
}

// lineOf returns d as a line.
func lineOf(d *subscriber.Delivery) line {
	l := line{ID: d.ID, Key: d.Key, PublishTime: d.PublishTime.UTC(), Producer: d.Producer}
	if d.Seq != 0 {
		l.Seq = ordering.FormatSeq(d.Seq)
	}
	attrs := maps.Clone(d.Headers)
	delete(attrs, ordering.Header) // the key, which is not an attribute (P2)
	if len(attrs) > 0 {
		l.Attributes = attrs
	}
	if utf8.Valid(d.Data) {
		s := string(d.Data)
		l.Data = &s
	} else {
		l.DataBase64 = d.Data
	}
	return l
}

// replay writes what a topic retains as JSON lines.
func (c *command) replay(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(c.errOut)
	fromFlag := fs.String("from", "", "replay from this time, RFC 3339 (default the oldest message retained)")
	since := fs.Duration("since", 0, "replay from this long ago")
	quiet := fs.Duration("quiet", subscriber.DefaultQuietPeriod, "end once nothing has arrived for this long")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() != 1 {
		return c.usageError("replay takes one topic")
	}
	var from time.Time
	switch {
	case *fromFlag != "" && *since != 0:
		return c.usageError("replay: -from or -since, not both")
	case *fromFlag != "":
		t, err := time.Parse(time.RFC3339Nano, *fromFlag)
		if err != nil {
			return c.usageError("replay: -from: %v", err)
		}
		from = t
	case *since > 0:
		from = time.Now().Add(-*since)
	}
	client, err := c.connect(ctx)
	if err != nil {
		return c.fail("replay: %v", err)
	}
	defer client.Close()
	enc := json.NewEncoder(c.out)
	enc.SetEscapeHTML(false) // for people and jq, not for a web page
	w := &lineWriter{enc: enc}
	err = subscriber.Replay(ctx, client, fs.Arg(0), from, func(_ context.Context, d *subscriber.Delivery) error {
		return w.write(lineOf(d))
	}, subscriber.WithQuietPeriod(*quiet))
	if err != nil {
		return c.fail("replay of %s: %v", fs.Arg(0), err)
	}
	return exitOK
}

// lineWriter writes lines from the handlers Replay runs at once, one
// whole line at a time: a key's lines in the order its handler calls ran.
type lineWriter struct {
	mu  sync.Mutex // guards enc
	enc *json.Encoder
}

func (w *lineWriter) write(l line) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.enc.Encode(l)
}

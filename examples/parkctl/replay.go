package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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
	topic, code := c.oneArg("replay", "topic", args)
	if code != exitOK {
		return code
	}
	from, code := c.replayFrom()
	if code != exitOK {
		return code
	}
	client, err := c.connect(ctx)
	if err != nil {
		return c.fail("replay: %v", err)
	}
	defer client.Close()
	err = c.reach(ctx, func(ctx context.Context) error {
		_, err := client.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: fullTopic(client, topic)})
		return err
	})
	if status.Code(err) == codes.NotFound {
		return c.fail("replay: no topic %s: check the topic, and the project (-project or GOOGLE_CLOUD_PROJECT)", fullTopic(client, topic))
	}
	if err != nil {
		return c.fail("replay of %s: %v", topic, err)
	}
	w := &lineWriter{out: c.out}
	err = subscriber.Replay(ctx, client, topic, from, func(_ context.Context, d *subscriber.Delivery) error {
		return w.write(lineOf(d))
	}, subscriber.WithQuietPeriod(c.f.quiet))
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, syscall.EPIPE) || errors.Is(err, os.ErrClosed):
		return exitOK // the reader has all it wants (| head); Replay deleted its subscription
	}
	return c.fail("replay of %s: %v", topic, err)
}

// replayFrom returns where -from or -since start the replay, zero for
// the oldest message retained.
func (c *command) replayFrom() (time.Time, int) {
	switch {
	case c.f.set["from"] && c.f.set["since"]:
		return time.Time{}, c.usageError("replay: -from or -since, not both")
	case c.f.set["since"] && c.f.since <= 0:
		return time.Time{}, c.usageError("replay: -since %v: need a duration more than 0 (leave -since out to replay all that is retained)", c.f.since)
	case c.f.quiet <= 0:
		return time.Time{}, c.usageError("replay: -quiet %v: need more than 0", c.f.quiet)
	case c.f.set["since"]:
		return time.Now().Add(-c.f.since), exitOK
	case c.f.from != "":
		t, err := time.Parse(time.RFC3339Nano, c.f.from)
		if err != nil {
			return time.Time{}, c.usageError("replay: -from: %v", err)
		}
		return t, exitOK
	}
	return time.Time{}, exitOK
}

// fullTopic returns topic's full name in client's project.
func fullTopic(client *pubsub.Client, topic string) string {
	if strings.HasPrefix(topic, "projects/") {
		return topic
	}
	return "projects/" + client.Project() + "/topics/" + topic
}

// lineWriter writes lines from the handlers Replay runs at once, one
// whole line at a time: a key's lines in the order its handler calls ran.
// A line's control characters are escaped, C1 ones included.
type lineWriter struct {
	mu  sync.Mutex // guards out
	out io.Writer
}

func (w *lineWriter) write(l line) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // for people and jq, not for a web page
	if err := enc.Encode(l); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	_, err := w.out.Write(inertJSON(b.Bytes()))
	return err
}

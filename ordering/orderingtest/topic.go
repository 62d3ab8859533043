package orderingtest

import (
	"strconv"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// A message is one published message. It is immutable once published, so
// every subscription and every delivery shares it.
type message struct {
	proto     *pubsubpb.PubsubMessage // with MessageId and PublishTime set
	serial    int64                   // server-wide publish order; the ID is its decimal form
	seq       int                     // 1-based position among its topic's messages with the same ordering key
	published time.Time
	size      int // counted against a stream's MaxOutstandingBytes
}

// A topic holds what was published to it and the subscriptions attached.
// Every field is guarded by Server.mu.
type topic struct {
	proto     *pubsubpb.Topic
	retention time.Duration // topic message retention; 0 keeps nothing for Seek
	subs      map[*subscription]struct{}
	msgs      []*message     // everything published, for Messages and retention
	keySeq    map[string]int // last seq handed out per ordering key
}

func newTopic(p *pubsubpb.Topic, retention time.Duration) *topic {
	return &topic{
		proto:     p,
		retention: retention,
		subs:      map[*subscription]struct{}{},
		keySeq:    map[string]int{},
	}
}

// retained reports whether Seek may still bring m back from the topic's own
// storage. The service keeps a topic's messages for its retention duration,
// acknowledged or not, which is what lets a subscription created later seek
// to a time before it existed.
func (t *topic) retained(m *message, now time.Time) bool {
	return t.retention > 0 && now.Sub(m.published) <= t.retention
}

// publishLocked stores pms as published now and hands a copy to every
// attached subscription. pms must already be valid. It returns the IDs.
func (s *Server) publishLocked(t *topic, pms []*pubsubpb.PubsubMessage) []string {
	now := time.Now()
	due := s.dueAfter(0) // the latency, once for the whole request
	ids := make([]string, len(pms))
	for i, pm := range pms {
		s.nextSerial++
		t.keySeq[pm.GetOrderingKey()]++
		p := proto.Clone(pm).(*pubsubpb.PubsubMessage)
		p.MessageId = strconv.FormatInt(s.nextSerial, 10)
		p.PublishTime = timestamppb.New(now)
		m := &message{
			proto:     p,
			serial:    s.nextSerial,
			seq:       t.keySeq[pm.GetOrderingKey()],
			published: now,
			size:      proto.Size(p),
		}
		t.msgs = append(t.msgs, m)
		for sub := range t.subs {
			sub.enqueue(m, due)
		}
		ids[i] = p.MessageId
	}
	s.changedLocked()
	return ids
}

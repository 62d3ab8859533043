package publisher

import (
	"math"
	"strings"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/keyorder/keyorder/ordering"
)

// checker is the Publisher whose rules [Check] applies: a stamped one,
// with the largest stamp a producer may set and the longest topic name
// the service takes, so that a message Check accepts is accepted by every
// Publisher on every topic, and by one made [WithoutStamps] that is given
// a stamp of any producer's.
var checker = &Publisher{
	maxBytes: maxMessageBytes("projects/" + strings.Repeat("p", 30) + "/topics/" + strings.Repeat("t", 255)),
	stamps: &stamper{attrs: ordering.StampAttributes, bound: ordering.Stamp{
		Producer: strings.Repeat("p", ordering.MaxProducerBytes),
		Seq:      ordering.MakeSeq(maxEpoch, math.MaxUint32),
	}.Size()},
}

// Check reports whether [Publisher.Publish] would accept msg published
// with [WithOrderingKey](key) and a stamp (P6, P9), without sending it:
// nil, or the *ValidationError Publish would return. It lets a message be
// refused where it is made, such as an outbox that stores it for a later
// Publish (publisher/outbox), rather than when the later Publish fails.
//
// It applies Publish's own checks, with the stamp counted at its largest
// and the topic's name at the longest the service takes, so it may refuse
// a message within a few hundred bytes of the 10 MB limit that a given
// Publisher would take. A Publisher [WithStampKey] takes one attribute
// and [ordering.SignatureSize] bytes less than Check allows, for the
// signature, and one on a client that traces (EnableOpenTelemetryTracing)
// one or two attributes less, and their bytes, for the trace context. A stamp header in msg is refused, as a stamped
// Publisher refuses it. Check does not allocate unless msg has headers.
func Check(msg *Message, key string) error {
	var out pubsubpb.PubsubMessage
	_, err := checker.prepare(msg, key, &out, nil)
	return err
}

package engine

import (
	"fmt"

	"github.com/keyorder/keyorder/ordering"
)

// A Gap is a run of a producer's sequence numbers for a key that Receive
// has not processed, found when a later number of the same key and
// producer came up for processing. subscriber.WithGapHandler is told of each. A gap
// lies within one epoch of the producer's numbers ([ordering.SplitSeq]).
type Gap struct {
	Key      string
	Producer string
	// From and To are the first and last missing numbers.
	From, To uint64
	// MessageID and Seq are the message after the gap, which is then
	// processed as usual.
	MessageID string
	Seq       uint64
	// Uncertain is set when the key may have been on another client of
	// the subscription while the numbers went missing: it had nothing
	// here when the message after the gap arrived, or its sequence was new
	// to the window. The service moves a key between clients only when
	// none of its messages is outstanding, so a gap seen while the key
	// stayed here is certain; one after any absence, however short, may be
	// the numbers another client processed, which this process cannot
	// know (S12). On a server that redelivers out of order
	// (subscriber.WithUnorderedRedelivery) every gap is uncertain: the numbers may
	// still come.
	Uncertain bool
}

// String describes g as a person reads it, numbers as epoch.n
// ([ordering.FormatSeq]): "key k, producer p: 0.4 to 0.5 missing before
// 0.6 (message m)".
func (g Gap) String() string {
	missing := ordering.FormatSeq(g.From)
	if g.To != g.From {
		missing += " to " + ordering.FormatSeq(g.To)
	}
	return fmt.Sprintf("key %s, producer %s: %s missing before %s (message %s)",
		g.Key, g.Producer, missing, ordering.FormatSeq(g.Seq), g.MessageID)
}

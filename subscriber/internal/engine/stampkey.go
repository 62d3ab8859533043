package engine

import (
	"context"
	"log/slog"

	"github.com/keyorder/keyorder/ordering"
)

// Signed stamps. A stamp (S12) is an attribute: whoever may publish to the
// topic, or push to the endpoint, can write one, with a real producer's ID
// and any number. Taken on trust, a forged stamp ahead of a producer's
// real numbers makes them copies, acked unrun. With [WithStampKey], a
// stamp counts only with the signature its producer made
// ([ordering.StampKeys]) over the key, the stamp and the data; a message
// whose signature is missing or wrong is not a stamped message at all:
//
//   - it is delivered as unstamped, Producer "" and Seq 0, its stamp and
//     signature attributes taken out of Headers as a valid stamp's are,
//     so that a handler that republishes its headers does not carry it;
//   - so it never enters the sequence window (S12): it is never taken for
//     a copy, never makes another message one, and reports no gap; and
//     the inbox (subscriber/inbox) refuses it as unstamped;
//   - it is counted in [Stats.Unverified] and the metric
//     keyorder.subscriber.unverified_stamps, and logged at Warn once per
//     producer and key (again at most hourly while it goes on).
//
// Every door checks: Receive (and Replay, which runs it) and a push
// request as a message arrives, a release of parked messages as it reads
// each copy. A verified stamp's signature stays with its delivery, so
// that a parked copy carries it and its release verifies it again.

// A stampNote is what became of a message's stamp as it arrived.
type stampNote struct {
	// sig is the signature of the stamp the delivery carries, if it came
	// with one, so that a parked copy carries it too (ParkingDoor.Copy).
	Sig string
	// refused is a well-formed stamp whose signature failed, and why; the
	// delivery carries no stamp.
	refused ordering.Stamp
	err     error
}

// takeStamp moves the stamp of headers, the attributes of a message of
// orderingKey and data, into d, unless keys are set and its signature
// does not verify; either way it leaves headers without the stamp and its
// signature. A malformed stamp stays in headers, and d unstamped.
func takeStamp(d *Delivery, headers map[string]string, keys *ordering.StampKeys, orderingKey string, data []byte) stampNote {
	st, err := ordering.ParseStamp(headers)
	if err != nil || st.IsZero() {
		return stampNote{}
	}
	var note stampNote
	if keys != nil {
		if err := keys.Verify(headers, orderingKey, st, data); err != nil {
			note.refused, note.err = st, err
		}
	}
	if note.err == nil {
		d.Producer, d.Seq = st.Producer, st.Seq
		note.Sig = headers[ordering.SignatureAttribute]
	}
	ordering.DeleteStamp(headers)
	return note
}

// stampUnverified counts a stamp refused for its signature, and logs it at
// Warn once per producer and key, again at most hourly while it goes on,
// with the count refused since: someone publishes with a producer's ID
// and no key, or a producer signs with a key this subscriber lacks.
func (o *recorder) stampUnverified(ctx context.Context, key string, st ordering.Stamp, id string, err error) {
	o.unverifiedStamps.Add(ctx, 1, o.unverifiedAs...)
	if ok, since := o.unverifiedLog.allow(key, st.Producer); ok {
		o.Log.LogAttrs(ctx, slog.LevelWarn, "keyorder/subscriber: stamp signature not verified; message run as unstamped",
			slog.String("key", key), slog.String("producer", st.Producer), slog.String("seq", ordering.FormatSeq(st.Seq)),
			slog.String("message_id", id), slog.Any("error", err), slog.Int64("suppressed_since_last_warning", since))
	}
}

package orderingtest

import (
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// An AckFailure is the reason a subscription with exactly-once delivery
// gives for one ack ID that failed.
//
// On such a subscription the service promises that "the message sent to a
// subscriber is guaranteed not to be resent before the message's
// acknowledgment deadline expires" and that "an acknowledged message will
// not be resent to a subscriber" (the Subscription reference). It keeps
// those promises by checking every ack ID it is sent, and says which ones
// failed: Acknowledge and ModifyAckDeadline fail with INVALID_ARGUMENT and
// an ErrorInfo detail whose reason is EXACTLY_ONCE_ACKID_FAILURE and whose
// metadata maps each failed ack ID to an AckFailure. The official client
// reads that map to complete each AckResult (Message.AckWithResult): an ack
// ID whose reason starts with TRANSIENT_ is sent again, and
// PERMANENT_FAILURE_INVALID_ACK_ID completes the result with
// AcknowledgeStatusInvalidAckID.
//
// The server models it so:
//
//   - An ack, nack or deadline extension of an ack ID whose lease is gone
//     fails with PermanentAckFailure: the lease expired, a redelivery
//     superseded it (a nack of an earlier message of its key,
//     [Server.RedeliverKey], Seek), it was acked already, or it was never
//     issued.
//   - A successful ack is final: no tail redelivery resends the message,
//     and [Server.DropAcks] does not apply.
//   - [Server.FailAcks] makes an ack fail on request.
//   - [Server.DuplicateDeliveries] does not apply.
//
// The ack IDs of a request that did not fail take effect, and the error
// lists only those that failed, as the service's does. The official Go
// client nonetheless completes the others with AcknowledgeStatusOther,
// because the request as a whole failed: a failed AckResult does not prove
// that the ack was lost, here as against the service.
type AckFailure string

const (
	// TransientAckFailure is a failure worth retrying. The official client
	// sends the ack again, with backoff, for up to 10 minutes.
	TransientAckFailure AckFailure = "TRANSIENT_FAILURE_UNORDERED_ACK_ID"
	// PermanentAckFailure is an invalid ack ID. The official client
	// completes the AckResult with AcknowledgeStatusInvalidAckID, and the
	// message is delivered again once its lease runs out.
	PermanentAckFailure AckFailure = "PERMANENT_FAILURE_INVALID_ACK_ID"
)

// FailAcks makes the next times acks of matching messages on subscriptions
// with exactly-once delivery fail with failure, without taking effect. The
// lease runs on: after a TransientAckFailure the client's retry can still
// succeed; after a PermanentAckFailure the message is delivered again when
// the lease runs out (use WithAckDeadline to make that quick). Other
// subscriptions accept every ack, as the service does; use DropAcks there.
// times <= 0 means until Remove.
func (s *Server) FailAcks(match Match, failure AckFailure, times int) *Fault {
	return s.addFault(&Fault{kind: failAck, match: match, failure: failure, left: times})
}

// exactlyOnce reports whether the subscription has exactly-once delivery.
func (sub *subscription) exactlyOnce() bool {
	return sub.proto.GetEnableExactlyOnceDelivery()
}

// ackError is the error an exactly-once subscription answers a request
// with when some of its ack IDs failed; failed maps each to its reason.
func ackError(failed map[string]AckFailure) error {
	md := make(map[string]string, len(failed))
	for id, why := range failed {
		md[id] = string(why)
	}
	st := status.New(codes.InvalidArgument,
		"orderingtest: some acknowledgement ids in the request were invalid: they may have expired, been superseded or been malformed")
	st, err := st.WithDetails(&errdetails.ErrorInfo{
		Reason:   "EXACTLY_ONCE_ACKID_FAILURE",
		Domain:   "pubsub.googleapis.com",
		Metadata: md,
	})
	if err != nil {
		panic(err) // ErrorInfo always marshals
	}
	return st.Err()
}

// ackFault decides whether an injected fault stops an ack of m: on an
// exactly-once subscription FailAcks, which reports why; elsewhere DropAcks,
// which accepts the ack silently.
func (sub *subscription) ackFault(m *pubsubpb.PubsubMessage) (stopped bool, why AckFailure) {
	if sub.exactlyOnce() {
		if f := sub.srv.takeFaultLocked(failAck, m); f != nil {
			return true, f.failure
		}
		return false, ""
	}
	return sub.srv.takeFaultLocked(dropAck, m) != nil, ""
}

package subscriber

import (
	"context"
	"fmt"
	"slices"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/keyorder/keyorder/subscriber/internal/controllog"
	"github.com/keyorder/keyorder/subscriber/internal/ephemeral"
)

// probeParking checks, when a Subscription with parking is made, that the
// server has the calls the control log and releases read with: a
// subscription with a filter, ordered, sought to a time. It makes one on
// the control topic of sub and deletes it, three requests, so that a
// server without them is named by CreateWithTopic or Open with an
// *UnsupportedError, not by the first Receive with a bare Unimplemented.
func probeParking(ctx context.Context, client *pubsub.Client, sub string) error {
	name := ephemeral.Name(sub, "subscriptions", "-parking-probe-"+ephemeral.NewID())
	admin := client.SubscriptionAdminClient
	_, err := admin.CreateSubscription(ctx, ephemeral.Subscription(name, controllog.Topic(sub), `attributes.keyorder-probe = "1"`))
	if err != nil {
		return unsupported("WithParking", "a subscription with a filter", err, codes.InvalidArgument)
	}
	defer ephemeral.Remove(context.WithoutCancel(ctx), client, name)
	_, err = admin.Seek(ctx, &pubsubpb.SeekRequest{
		Subscription: name, Target: &pubsubpb.SeekRequest_Time{Time: timestamppb.New(time.Now().Add(-time.Minute))},
	})
	if err != nil {
		return unsupported("WithParking", "Seek to a time on an ordered subscription", err)
	}
	return nil
}

// unsupported returns the error for call, which what needs, failing with
// err: an *UnsupportedError if the server said it has no such call, with
// Unimplemented or one of also, else err wrapped.
func unsupported(what, call string, err error, also ...codes.Code) error {
	if c := status.Code(err); c == codes.Unimplemented || slices.Contains(also, c) {
		return &UnsupportedError{Call: call, For: what, Err: err}
	}
	return fmt.Errorf("keyorder/subscriber: %s, for %s: %w", call, what, err)
}

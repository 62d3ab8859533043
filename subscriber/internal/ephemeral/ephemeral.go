// Package ephemeral makes the subscriptions keyorder reads a topic through
// for one reader, such as a follower of the parking control log or a
// release of a parked key, and names what keyorder makes beside a
// subscription.
package ephemeral

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strings"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Subscription describes a subscription made for one reader: ordered,
// with filter, keeping unacknowledged messages 10 minutes and expiring
// after a day idle, the service's minimums. What it replays comes from the
// topic's retention, not its own.
func Subscription(name, topic, filter string) *pubsubpb.Subscription {
	return &pubsubpb.Subscription{
		Name: name, Topic: topic, EnableMessageOrdering: true, Filter: filter,
		AckDeadlineSeconds:       60,
		MessageRetentionDuration: durationpb.New(10 * time.Minute),
		ExpirationPolicy:         &pubsubpb.ExpirationPolicy{Ttl: durationpb.New(24 * time.Hour)},
	}
}

// Remove deletes a subscription made for one reader, giving up when ctx
// ends or after removeTimeout: a shutdown bounds it (S7). One left behind
// expires after a day without a reader.
func Remove(ctx context.Context, client *pubsub.Client, name string) {
	ctx, cancel := context.WithTimeout(ctx, removeTimeout)
	defer cancel()
	err := client.SubscriptionAdminClient.DeleteSubscription(ctx, &pubsubpb.DeleteSubscriptionRequest{Subscription: name})
	if err != nil && status.Code(err) != codes.NotFound {
		slog.Warn("keyorder/subscriber: could not delete a subscription made for parking; it expires after a day idle", "subscription", name, "err", err)
	}
}

// removeTimeout bounds a Remove whose ctx does not: a delete is one
// short request.
const removeTimeout = 10 * time.Second

// Name returns the full name of a resource keyorder makes beside the
// subscription sub (projects/P/subscriptions/S): in collection
// ("topics" or "subscriptions") of project P, with the ID S+suffix, S
// shortened with a hash of it if the whole would be too long for the
// service.
func Name(sub, collection, suffix string) string {
	rest, _ := strings.CutPrefix(sub, "projects/")
	project, id, _ := strings.Cut(rest, "/subscriptions/")
	return "projects/" + project + "/" + collection + "/" + derivedID(id, suffix)
}

// maxResourceID is the longest topic or subscription ID the service takes.
const maxResourceID = 255

// derivedID returns id with suffix, shortening id with a hash of it if the
// whole would be too long.
func derivedID(id, suffix string) string {
	if len(id)+len(suffix) <= maxResourceID {
		return id + suffix
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	tag := fmt.Sprintf("-%08x", h.Sum32())
	return id[:maxResourceID-len(suffix)-len(tag)] + tag + suffix
}

// NewID returns a random ID, 16 hex digits, to name a reader, a park or a
// snapshot.
func NewID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

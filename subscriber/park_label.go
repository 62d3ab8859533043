package subscriber

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"regexp"
	"strings"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/keyorder/keyorder/subscriber/internal/ephemeral"
	"github.com/keyorder/keyorder/subscriber/internal/parking"
)

// LabelParking is the label of a subscription whose processes park keys
// ([WithParking]): its value names the parking topic, by its ID when the
// topic is in the subscription's project and the ID fits the service's
// label rules (lowercase letters, digits, "-" and "_", 63 at most), else
// by "sha256-" and the first 16 hex digits of the SHA-256 of its full
// name.
//
// Every process that receives a parking subscription must park, to the
// same topic: one without parking runs a parked key's next message before
// the parked ones, one with another topic splits a key's parked messages
// over two. The label is where every process sees the choice. The first
// [CreateWithTopic] or [Open] with WithParking sets it; after that, one
// without WithParking, or with another topic, fails with
// [ErrInvalidConfig], before it receives anything. See the package doc,
// "Turning parking on and off", for changing it on a running deployment.
//
// The first topic is decided once: of the processes that open an
// unlabelled subscription at once with different topics, the first to
// create the subscription's choice (a subscription named after it with
// "-parking-choice", on its parking topic, deleted once the label is
// written) labels it, and the others fail with [ErrInvalidConfig],
// whatever the timing.
const LabelParking = "keyorder-parking"

// labelValueRE is what the service accepts as a label value.
var labelValueRE = regexp.MustCompile(`^[a-z0-9_-]{1,63}$`)

// parkingLabel returns the value of LabelParking for a subscription of
// project that parks to topic, a full name.
func parkingLabel(project, topic string) string {
	rest, _ := strings.CutPrefix(topic, "projects/")
	p, id, _ := strings.Cut(rest, "/topics/")
	if p == project && labelValueRE.MatchString(id) {
		return id
	}
	sum := sha256.Sum256([]byte(topic))
	return "sha256-" + hex.EncodeToString(sum[:8])
}

// checkParkingLabel refuses a process whose parking, topic (a full name,
// "" without WithParking), differs from the one sub's label records.
func checkParkingLabel(sub *pubsubpb.Subscription, topic string) error {
	have, labelled := sub.GetLabels()[LabelParking]
	switch {
	case !labelled:
		return nil
	case topic == "":
		return invalid("the subscription %s parks keys (label %s=%s): open it with WithParking and that topic, as every process that receives it must, or turn parking off first (see the package doc, \"Turning parking on and off\")",
			sub.GetName(), LabelParking, have)
	case have != parkingLabel(projectOf(sub.GetName()), topic):
		return invalid("WithParking(%s): the subscription %s parks to another topic (label %s=%s): every process must park to the same one; use that topic, or change it by turning parking off and on again (see the package doc, \"Turning parking on and off\")",
			topic, sub.GetName(), LabelParking, have)
	}
	return nil
}

// chooseParking makes t.Park the parking topic of sub, whose label
// checkParkingLabel accepted, unless it is labelled already.
//
// Two processes that open an unlabelled subscription at once must not
// both label it, each with its topic: a read then a write lets the last
// writer win while both run. The service has no compare-and-set on labels
// (a subscription has no etag), but creating a resource is one: the first
// CreateSubscription of a name succeeds, the others get AlreadyExists. So
// an opener first creates the choice, a subscription on its parking topic
// named after sub (choiceName) that receives nothing; then reads the
// label again and writes it; then deletes the choice. One that finds the
// choice made on another topic is refused. One that makes it after
// another's was deleted reads the label that one wrote before deleting
// it, and is refused by checkParkingLabel if it differs. No timing is
// assumed.
func chooseParking(ctx context.Context, client *pubsub.Client, sub *pubsubpb.Subscription, t *parking.Topics) error {
	if _, labelled := sub.GetLabels()[LabelParking]; labelled {
		return nil
	}
	name, admin := sub.GetName(), client.SubscriptionAdminClient
	choice := choiceName(name)
	_, err := admin.CreateSubscription(ctx, ephemeral.Subscription(choice, t.Park, `attributes.keyorder-parking-choice = "1"`))
	switch {
	case status.Code(err) == codes.AlreadyExists:
		// Another opener's, under way; or one a crash left, for a day.
		held, err := admin.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: choice})
		switch {
		case status.Code(err) == codes.NotFound:
			// Deleted meanwhile, once its label was written: read below.
		case err != nil:
			return fmt.Errorf("keyorder/subscriber: choosing the parking topic of %s: %w", name, err)
		case held.GetTopic() != t.Park:
			return invalid("WithParking(%s): another process opening the subscription %s chose another parking topic, %s, at the same time: every process must park to the same one; use that topic (if no process is opening it, a crash left the choice %s behind: delete it)",
				t.Park, name, held.GetTopic(), choice)
		}
	case err != nil:
		return fmt.Errorf("keyorder/subscriber: choosing the parking topic of %s: %w", name, err)
	default:
		// Deleted once the label is written, or not: the next opener of
		// this topic goes on, and one of another reads the label.
		defer ephemeral.Remove(context.WithoutCancel(ctx), client, choice)
	}
	if sub, err = admin.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: name}); err != nil {
		return fmt.Errorf("keyorder/subscriber: subscription %s: %w", name, err)
	}
	if err := checkParkingLabel(sub, t.Park); err != nil {
		return err // labelled meanwhile, by another process
	}
	if _, labelled := sub.GetLabels()[LabelParking]; labelled {
		return nil
	}
	return labelParking(ctx, client, sub, parkingLabel(projectOf(name), t.Park))
}

// choiceName is the name of the subscription that holds the choice of
// sub's parking topic while it is being labelled (chooseParking).
func choiceName(sub string) string { return ephemeral.Name(sub, "subscriptions", "-parking-choice") }

// labelParking labels sub as parking to the topic whose label value is
// value, keeping its other labels.
func labelParking(ctx context.Context, client *pubsub.Client, sub *pubsubpb.Subscription, value string) error {
	labels := maps.Clone(sub.GetLabels())
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelParking] = value
	_, err := client.SubscriptionAdminClient.UpdateSubscription(ctx, &pubsubpb.UpdateSubscriptionRequest{
		Subscription: &pubsubpb.Subscription{Name: sub.GetName(), Labels: labels},
		UpdateMask:   &fieldmaskpb.FieldMask{Paths: []string{"labels"}},
	})
	if err != nil {
		return fmt.Errorf("keyorder/subscriber: labelling %s as parking (%s=%s): %w", sub.GetName(), LabelParking, value, err)
	}
	return nil
}

// projectOf returns the project of a full resource name.
func projectOf(name string) string {
	rest, _ := strings.CutPrefix(name, "projects/")
	p, _, _ := strings.Cut(rest, "/")
	return p
}

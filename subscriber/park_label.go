package subscriber

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"regexp"
	"strings"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/keyorder/keyorder/subscriber/internal/controllog"
)

// LabelParking is the label of a subscription whose processes park keys
// ([WithParking]): its value names the parking topic, by its ID when the
// topic is in the subscription's project and the ID fits the service's
// label rules (lowercase letters, digits, "-" and "_", 63 at most), else
// by "sha256-" and the first 16 hex digits of the SHA-256 of its full
// name.
//
// The first topic is decided once, where every process sees it: processes
// that open an unlabelled subscription at once, with different topics,
// record their choices in the parking control log, whose order picks one;
// the others fail with [ErrInvalidConfig], whatever the timing. A choice
// holds against another topic for a minute; after that the label
// decides. (To turn parking off and on again with another topic, as the
// package doc says, remove the label at least a minute after parking was
// first turned on.)
//
// Every process that receives a parking subscription must park, to the
// same topic: one without parking runs a parked key's next message before
// the parked ones, one with another topic splits a key's parked messages
// over two. The label is where every process sees the choice. The first
// [CreateWithTopic] or [Open] with WithParking sets it; after that, one
// without WithParking, or with another topic, fails with
// [ErrInvalidConfig], before it receives anything. See the package doc,
// "Turning parking on and off", for changing it on a running deployment.
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

// chooseParking makes topic, a full name, the parking topic of sub,
// whose label checkParkingLabel accepted, unless it is labelled already.
//
// Two processes that open an unlabelled subscription at once must not
// both label it, each with its topic: a read then a write lets the last
// writer win while both run. The control log decides instead: each
// records its choice (controllog.Choose), and the first in the log's
// order holds; a process whose choice lost is refused. The choice holds
// for controllog.TopicHold, so the whole of this, from the read that
// found no label to the label written, must take less than half of it:
// then a process that read the subscription before the winner's label
// was written recorded its choice within the hold, and was refused.
func chooseParking(ctx context.Context, client *pubsub.Client, sub *pubsubpb.Subscription, t *parkingTopics) error {
	if _, labelled := sub.GetLabels()[LabelParking]; labelled {
		return nil
	}
	lg, err := controllog.Open(ctx, client, t.logConfig(sub.GetName(), 10*time.Second, false))
	if err != nil {
		return fmt.Errorf("keyorder/subscriber: choosing the parking topic of %s: %w", sub.GetName(), err)
	}
	defer func() { _ = lg.Close() }()
	begun, name := time.Now(), sub.GetName()
	if sub, err = client.SubscriptionAdminClient.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: name}); err != nil {
		return fmt.Errorf("keyorder/subscriber: subscription %s: %w", name, err)
	}
	if err := checkParkingLabel(sub, t.park); err != nil {
		return err // labelled meanwhile, by another process
	}
	if _, labelled := sub.GetLabels()[LabelParking]; labelled {
		return nil
	}
	value := parkingLabel(projectOf(sub.GetName()), t.park)
	chosen, err := lg.Choose(ctx, value)
	switch {
	case err != nil:
		return fmt.Errorf("keyorder/subscriber: choosing the parking topic of %s: %w", sub.GetName(), err)
	case chosen != value:
		return invalid("WithParking(%s): another process opening the subscription %s at the same time chose another parking topic (label %s=%s): every process must park to the same one; use that topic",
			t.park, sub.GetName(), LabelParking, chosen)
	}
	if err := labelParking(ctx, client, sub, value); err != nil {
		return err
	}
	if took := time.Since(begun); took > controllog.TopicHold/2 {
		return fmt.Errorf("keyorder/subscriber: choosing the parking topic of %s took %v, more than %v: another process may have chosen another meanwhile; open the subscription again to check", sub.GetName(), took.Round(time.Second), controllog.TopicHold/2)
	}
	return nil
}

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

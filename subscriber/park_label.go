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
	"google.golang.org/protobuf/types/known/fieldmaskpb"
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

// labelParking labels sub as parking to topic, a full name, unless it is
// labelled already.
func labelParking(ctx context.Context, client *pubsub.Client, sub *pubsubpb.Subscription, topic string) error {
	if _, labelled := sub.GetLabels()[LabelParking]; labelled {
		return nil
	}
	value := parkingLabel(projectOf(sub.GetName()), topic)
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

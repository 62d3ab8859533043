package subscriber

import (
	"os"

	"google.golang.org/api/option"
)

// RegionalEndpoint returns the client options that pin a Pub/Sub client
// to region's locational endpoint, <region>-pubsub.googleapis.com:443, for
// pubsub.NewClient:
//
//	client, err := pubsub.NewClient(ctx, project, subscriber.RegionalEndpoint("europe-west1")...)
//
// The service keeps a key's order only among the messages published to
// one region, and its global endpoint routes each client to a region near
// it. So the publishers of a key in several places pin their clients to
// one region, and so does every process of a subscription with
// [WithParking]: the client passed to [CreateWithTopic] or [Open] is the
// one parking publishes its control log with, which every process must
// publish to one region.
//
// When PUBSUB_EMULATOR_HOST is set, RegionalEndpoint returns no option, so
// that the client goes to the emulator: an endpoint option would override
// the variable, and every call would then wait for a region the emulator
// is not. An empty region also returns none: the global endpoint.
func RegionalEndpoint(region string) []option.ClientOption {
	if region == "" || os.Getenv("PUBSUB_EMULATOR_HOST") != "" {
		return nil
	}
	return []option.ClientOption{option.WithEndpoint(region + "-pubsub.googleapis.com:443")}
}

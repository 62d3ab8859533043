package subscriber

import (
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestPolicyDifferences checks what a Subscription warns about when an
// existing subscription's policies differ from the options.
func TestPolicyDifferences(t *testing.T) {
	t.Parallel()
	const dlq = "projects/p/topics/dlq"
	retry := func(lo, hi time.Duration) *pubsubpb.RetryPolicy {
		return &pubsubpb.RetryPolicy{MinimumBackoff: durationpb.New(lo), MaximumBackoff: durationpb.New(hi)}
	}
	for _, tc := range []struct {
		name string
		want servicePolicies
		have *pubsubpb.Subscription
		diff int
	}{
		{"nothing asked", servicePolicies{}, &pubsubpb.Subscription{RetryPolicy: retry(time.Second, time.Minute)}, 0},
		{"as asked", servicePolicies{deadLetterTopic: dlq, maxDeliveryAttempts: 5, retry: true, minBackoff: time.Second, maxBackoff: time.Minute},
			&pubsubpb.Subscription{
				DeadLetterPolicy: &pubsubpb.DeadLetterPolicy{DeadLetterTopic: dlq}, // 5 by default
				RetryPolicy:      retry(time.Second, time.Minute),
			}, 0},
		{"service defaults", servicePolicies{retry: true, minBackoff: 10 * time.Second, maxBackoff: 600 * time.Second},
			&pubsubpb.Subscription{RetryPolicy: &pubsubpb.RetryPolicy{}}, 0},
		{"no policies", servicePolicies{deadLetterTopic: dlq, maxDeliveryAttempts: 5, retry: true, minBackoff: time.Second, maxBackoff: time.Minute},
			&pubsubpb.Subscription{}, 2},
		{"other attempts", servicePolicies{deadLetterTopic: dlq, maxDeliveryAttempts: 9},
			&pubsubpb.Subscription{DeadLetterPolicy: &pubsubpb.DeadLetterPolicy{DeadLetterTopic: dlq, MaxDeliveryAttempts: 10}}, 1},
		{"other backoff", servicePolicies{retry: true, minBackoff: time.Second, maxBackoff: time.Minute},
			&pubsubpb.Subscription{RetryPolicy: retry(time.Second, 2*time.Minute)}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			diff := tc.want.differences(nil, policiesOf(tc.have))
			assert.Len(t, diff, tc.diff, "%q", diff)
		})
	}
}

package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// TestOutcomeNames pins the values of keyorder.outcome of the handler's
// calls that dashboards and alerts match; those of settled messages are
// pinned with the outcome type (TestOutcomeLabels).
func TestOutcomeNames(t *testing.T) {
	t.Parallel()
	assert.Equal(t, [3]string{"ok", "error", "panic"}, callOutcomes)
}

// TestSequenceLogs checks the hooks the check of per-key sequence numbers
// calls: one record per gap or duplicate found, with the key, the producer
// and the numbers.
func TestSequenceLogs(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	cfg := testConfig()
	cfg.Logger = slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	o := newRecorder(&cfg, "projects/p/subscriptions/s",
		func() (int, int, time.Duration) { return 0, 0, 0 })
	defer o.close()

	o.sequenceGap(context.Background(), "k", "producer-1", 4, 6, false)
	o.sequenceGap(context.Background(), "k", "producer-1", 8, 8, true)
	o.sequenceDuplicate(context.Background(), true, "k", "producer-1", 3, "m-9")
	o.sequenceDuplicate(context.Background(), false, "k", "producer-1", 4, "m-10")

	var recs []map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		var rec map[string]any
		require.NoError(t, json.Unmarshal(line, &rec))
		delete(rec, "time")
		recs = append(recs, rec)
	}
	assert.Equal(t, []map[string]any{
		{"level": "WARN", "msg": "keyorder/subscriber: sequence gap", "subscription": "projects/p/subscriptions/s",
			"key": "k", "producer": "producer-1", "first_missing": "0.4", "last_missing": "0.6", "uncertain": false},
		{"level": "INFO", "msg": "keyorder/subscriber: sequence gap", "subscription": "projects/p/subscriptions/s",
			"key": "k", "producer": "producer-1", "first_missing": "0.8", "last_missing": "0.8", "uncertain": true},
		{"level": "INFO", "msg": "keyorder/subscriber: duplicate sequence number", "subscription": "projects/p/subscriptions/s",
			"key": "k", "producer": "producer-1", "seq": "0.3", "message_id": "m-9"},
		{"level": "DEBUG", "msg": "keyorder/subscriber: duplicate sequence number", "subscription": "projects/p/subscriptions/s",
			"key": "k", "producer": "producer-1", "seq": "0.4", "message_id": "m-10"},
	}, recs)
}

// BenchmarkRecorder measures what the recorder adds to each delivery: one
// settle and one handler call, with the default global meter provider
// (which does nothing until the application installs one) beside an SDK
// provider.
func BenchmarkRecorder(b *testing.B) {
	for _, tc := range []struct {
		name     string
		provider metric.MeterProvider
	}{
		{"global", nil},
		{"sdk", sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))},
	} {
		b.Run(tc.name, func(b *testing.B) {
			cfg := testConfig()
			cfg.MeterProvider = tc.provider
			o := newRecorder(&cfg, "projects/p/subscriptions/s",
				func() (int, int, time.Duration) { return 0, 0, 0 })
			defer o.close()
			j := &Job{Ctx: context.Background(), D: Delivery{ID: "1", Key: "k"}}
			b.ReportAllocs()
			for b.Loop() {
				o.handled(j, Verdict{Out: Acked, took: time.Millisecond})
				o.settled(Acked)
			}
		})
	}
}

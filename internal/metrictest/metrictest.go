// Package metrictest reads what keyorder's packages report, for their
// tests: the metrics, through an OpenTelemetry SDK meter provider read by
// hand, and the logs, through a JSON handler. It is imported by tests only,
// so the SDK stays out of the library's dependencies.
package metrictest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/keyorder/keyorder/internal/harness"
)

// A Meter is an SDK meter provider read by hand, for one test.
type Meter struct {
	*sdkmetric.MeterProvider
	reader *sdkmetric.ManualReader
}

// NewMeter returns a Meter shut down when t ends.
func NewMeter(t testing.TB) Meter {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return Meter{mp, reader}
}

// An Instrument is what one instrument reported: its unit, and each data
// point's value (a histogram's count, with its sum in Sums) by its
// attributes other than the one naming the topic or subscription, written
// "k=v,k=v" in key order.
type Instrument struct {
	Unit   string
	Points map[string]float64
	Sums   map[string]float64
}

// Read reads every instrument of m. Every data point must carry the
// attribute named by attr with the value name, the topic or subscription
// measured, and no attribute value may be one of keys: keys are unbounded,
// and never go in an attribute. Read reports a breach as an error, rather
// than failing a test, so that it can run on any goroutine.
func (m Meter) Read(attr, name string, keys []string) (map[string]Instrument, error) {
	var rm metricdata.ResourceMetrics
	if err := m.reader.Collect(context.Background(), &rm); err != nil {
		return nil, err
	}
	var errs []error
	out := map[string]Instrument{}
	for _, sm := range rm.ScopeMetrics {
		for _, md := range sm.Metrics {
			in := Instrument{Unit: md.Unit, Points: map[string]float64{}, Sums: map[string]float64{}}
			add := func(set attribute.Set, v, sum float64) {
				var kv []string
				named := false
				for _, a := range set.ToSlice() {
					val := a.Value.String()
					if slices.Contains(keys, val) {
						errs = append(errs, fmt.Errorf("%s: key %q in attribute %s", md.Name, val, a.Key))
					}
					if string(a.Key) == attr {
						named = val == name
						continue
					}
					kv = append(kv, string(a.Key)+"="+val)
				}
				if !named {
					errs = append(errs, fmt.Errorf("%s: a point without %s=%s: %v", md.Name, attr, name, set.ToSlice()))
				}
				slices.Sort(kv)
				k := strings.Join(kv, ",")
				in.Points[k] += v
				in.Sums[k] += sum
			}
			switch d := md.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					add(p.Attributes, float64(p.Value), 0)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					add(p.Attributes, float64(p.Count), p.Sum)
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					add(p.Attributes, float64(p.Value), 0)
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					add(p.Attributes, p.Value, 0)
				}
			default:
				errs = append(errs, fmt.Errorf("%s: unexpected data %T", md.Name, md.Data))
			}
			out[md.Name] = in
		}
	}
	return out, errors.Join(errs...)
}

// Collect is Read on the test's goroutine: a breach fails t.
func (m Meter) Collect(t testing.TB, attr, name string, keys []string) map[string]Instrument {
	t.Helper()
	got, err := m.Read(attr, name, keys)
	require.NoError(t, err)
	return got
}

// A Log is a JSON log of one test, safe for concurrent use.
type Log struct{ harness.Buffer }

// Handler returns a handler that writes every record, Debug and up, to l.
func (l *Log) Handler() slog.Handler {
	return slog.NewJSONHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug})
}

// Logger returns a logger that writes to l through Handler.
func (l *Log) Logger() *slog.Logger { return slog.New(l.Handler()) }

// Records returns the records logged so far, decoded, in order.
func (l *Log) Records(t testing.TB) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace([]byte(l.String())), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var rec map[string]any
		require.NoError(t, json.Unmarshal(line, &rec), "%s", line)
		out = append(out, rec)
	}
	return out
}

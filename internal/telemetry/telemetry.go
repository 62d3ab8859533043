// Package telemetry holds what keyorder's publisher and subscriber share in
// reporting metrics through the OpenTelemetry metric API.
package telemetry

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
)

// Meter returns the meter called name of mp, or of the global provider,
// otel.GetMeterProvider(), as it is now, if mp is nil. The global provider
// does nothing until the application installs one.
func Meter(mp metric.MeterProvider, name string) metric.Meter {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	return mp.Meter(name)
}

// DurationBuckets are OpenTelemetry's recommended bounds for histograms
// of durations in seconds (the SDK's defaults are meant for
// milliseconds).
var DurationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}

package publisher

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"go.opentelemetry.io/otel/metric/noop"
)

// TestRateWindows pins the rate check's rule (keyRate): tumbling windows
// from a gate's first message, a warning as soon as one window's bytes go
// over the limit, and one warning per gate.
func TestRateWindows(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	type msg struct {
		at   time.Duration
		size int32
	}
	// every returns n messages of size bytes, one each step from from.
	every := func(n int, from, step time.Duration, size int32) []msg {
		out := make([]msg, n)
		for i := range out {
			out[i] = msg{from + time.Duration(i)*step, size}
		}
		return out
	}
	for _, tc := range []struct {
		name string
		msgs []msg
		warn int // index of the message that makes the key hot; -1 for none
	}{
		{"over within a window", every(11, 0, 10*ms, 100), 10},
		{"exactly the limit", every(10, 0, 10*ms, 100), -1},
		{"just over, spread over the window", every(10, 0, 100*ms, 101), 9},
		{"under the rate for many windows", every(50, 0, 200*ms, 199), -1},
		{"over, long after the gate was made", append(every(10, 0, 200*ms, 100), every(11, 5000*ms, 10*ms, 100)...), 20},
		{"a burst across two windows", []msg{{0, 900}, {999 * ms, 99}, {1000 * ms, 900}}, -1},
		{"once per gate", every(30, 0, ms, 500), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var logs bytes.Buffer
			o := newRecorder(&config{meterProvider: noop.NewMeterProvider(), logger: slog.New(slog.NewTextHandler(&logs, nil))}, "projects/p/topics/t")
			o.window, o.limit = time.Second, 1000
			var kr keyRate
			warn := -1
			for i, m := range tc.msgs {
				o.account("k", &kr, &Result{start: m.at, size: m.size})
				if kr.warned && warn < 0 {
					warn = i
				}
			}
			assert.Equal(t, tc.warn, warn)
			n := strings.Count(logs.String(), "keyorder/publisher: hot key")
			if tc.warn >= 0 {
				assert.Equal(t, 1, n, "%s", logs.String())
				assert.Contains(t, logs.String(), "key=k ")
			} else {
				assert.Zero(t, n, "%s", logs.String())
			}
		})
	}
}

// TestRateDefaults pins the documented rule: more than 5 MB within 5 s.
func TestRateDefaults(t *testing.T) {
	t.Parallel()
	o := newRecorder(&config{meterProvider: noop.NewMeterProvider(), logger: slog.New(slog.DiscardHandler)}, "projects/p/topics/t")
	assert.Equal(t, 5*time.Second, o.window)
	assert.Equal(t, int64(5_000_000), o.limit)
}

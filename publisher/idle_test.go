package publisher_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/publisher"
)

// TestIdleKeysLeaveNoState checks P7: waves of distinct keys, each key used
// once and then idle, must leave no gate behind and must not grow the
// heap. The server answers without storing, so the heap measures the client
// side only: keyorder's gates and the official client's per-key bundlers.
func TestIdleKeysLeaveNoState(t *testing.T) {
	if testing.Short() {
		t.Skip("publishes hundreds of thousands of messages")
	}
	// 350,000 keys without the race detector; under it, RPCs are ten
	// times slower and 50,000 keys keep the test short. Growth is measured
	// per key, so both sizes test the same thing.
	const warmup = 2
	waves, perWave := 7, 50_000
	if raceEnabled {
		waves, perWave = 5, 10_000
	}
	e := newEnv(t, discardPublishes())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	p := e.newPublisher(t)
	idleGoroutines := runtime.NumGoroutine()

	// heap reads the live heap once the official client's per-key
	// goroutines, which may still be unwinding after the last result was
	// ready, have exited: the reading then holds only what stays.
	heap := func() uint64 {
		settled := time.Now().Add(10 * time.Second)
		for runtime.NumGoroutine() > idleGoroutines && time.Now().Before(settled) {
			time.Sleep(time.Millisecond) // polling a condition, bounded above
		}
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	// A wave is published in chunks of keys, each waited for before the
	// next: the runtime keeps the descriptor of every goroutine that ever
	// ran at once, for reuse, so the heap grows with the peak number of
	// keys in flight (a goroutine each, here and in the official client),
	// which depends on how loaded the machine is. Chunks bound that peak,
	// and the warm-up waves reach it.
	const chunk = 1000
	results := make([]*publisher.Result, chunk)
	data := []byte("x")
	var base uint64
	for w := 0; w < waves; w++ {
		for c := 0; c < perWave; c += chunk {
			for i := range results {
				results[i] = p.Publish(ctx, &publisher.Message{Data: data}, publisher.WithOrderingKey(fmt.Sprintf("w%d-k%d", w, c+i)))
			}
			for _, r := range results {
				_, err := r.Get(ctx)
				require.NoError(t, err)
			}
			clear(results)
		}
		// A key's gate is gone by the time its last result is ready, and
		// shard maps that held more than ShrinkAt keys have been rebuilt.
		keys, peak := publisher.GateState(p)
		require.Zero(t, keys, "wave %d: idle keys still have a gate", w)
		require.LessOrEqual(t, peak, publisher.ShrinkAt, "wave %d: an emptied shard map kept its peak size", w)
		if w == warmup-1 {
			base = heap() // buffers, pools and maps have reached their size
		}
	}
	grown := int64(heap()) - int64(base)
	keys := (waves - warmup) * perWave
	perKey := float64(grown) / float64(keys)
	t.Logf("heap after %d warm-up waves %d KB, after %d more keys %+d KB: %.2f bytes per idle key", warmup, base>>10, keys, grown>>10, perKey)
	assert.Less(t, perKey, 8.0, "idle keys leave state behind")
}

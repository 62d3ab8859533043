package publisher

import (
	"context"
	"log/slog"
	"time"
)

// The service takes about 1 MB/s per ordering key; a key published faster
// only builds a backlog in the publisher, and its latency grows
// without bound. The rate check warns about such a key, once per episode.
const (
	// rateLimit is the service's publish throughput per ordering key, in
	// bytes per second.
	rateLimit = 1_000_000
	// rateWindow is how long a key must keep above rateLimit, on average,
	// to be hot: long enough that a burst the publisher absorbs in
	// a second or two does not count.
	rateWindow = 5 * time.Second
)

// keyRate is the rate check of one key, kept in its queue (keyQueue.rate),
// so that it costs no state once the key is idle (P7).
//
// Windows tumble: a window starts at the first message enqueued on the
// queue, and again at the first message enqueued rateWindow or more after
// the current window started. The key is hot when the encoded bytes of
// the messages enqueued in one window (Publish calls, held messages and
// Retry's included) exceed rateLimit × rateWindow, 5 MB: it then published
// faster than 1 MB/s on average over that window, and the service needs at
// least the window's length to take those bytes. It warns as soon as the
// bytes go over, without waiting for the window to end.
//
// An episode is the life of the queue: a hot key warns once, and again
// only after its queue has been deleted (every message outstanding done)
// and a new queue finds it hot. A key that goes idle between messages has
// no queue to count in, and is never found hot; but a key publishing faster
// than the service takes is never idle, as its backlog waits in the
// publisher.
type keyRate struct {
	start  time.Duration // when the current window started, by recorder.now
	bytes  int64         // encoded bytes enqueued since start
	warned bool          // set once the key was found hot; nothing more is counted
}

// account adds r, just enqueued on key, to the key's rate check, and warns
// if that makes the key hot. The shard's mutex is held.
func (o *recorder) account(key string, kr *keyRate, r *Result) {
	if kr.warned {
		return
	}
	if kr.bytes == 0 || r.start-kr.start >= o.window {
		kr.start, kr.bytes = r.start, 0
	}
	kr.bytes += int64(r.size)
	if kr.bytes <= o.limit {
		return
	}
	kr.warned = true
	o.hotKeys.Add(context.Background(), 1, o.hotAs...)
	o.log.LogAttrs(context.Background(), slog.LevelWarn, "keyorder/publisher: hot key",
		slog.String("key", key), slog.Int64("bytes", kr.bytes),
		slog.Duration("within", r.start-kr.start), slog.Duration("window", o.window),
		slog.Int64("limit_bytes", o.limit))
}

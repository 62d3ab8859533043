package publisher

import (
	"context"

	"cloud.google.com/go/pubsub/v2"
	"golang.org/x/sync/semaphore"
)

// flowControl bounds the messages and bytes a publisher has outstanding.
//
// A refused message fails alone, before its key is touched (the official
// client's flow controller would pause the key, failing every earlier
// message of it still queued), and a cancelled ctx leaves no trace.
//
// Room is released as each message is done, not in publish order (P8):
// when its request returns, whatever the other keys' requests do.
type flowControl struct {
	block    bool                // FlowControlBlock; otherwise FlowControlSignalError
	count    *semaphore.Weighted // outstanding messages
	bytes    *semaphore.Weighted // outstanding bytes, nil for no limit
	maxMsgs  int64
	maxBytes int64
	// reclaim releases room that done messages still hold; acquire
	// calls it before it refuses a message or waits. Set once by New:
	// a message's room is released as its request returns, so there is
	// nothing to reclaim.
	reclaim func()
	// waiting, if set, is called when acquire starts to wait: a hook
	// for tests, set before the first Publish.
	waiting func()
}

// newFlowControl returns nil when s asks for no flow control.
func newFlowControl(s pubsub.FlowControlSettings) *flowControl {
	if s.LimitExceededBehavior != pubsub.FlowControlBlock && s.LimitExceededBehavior != pubsub.FlowControlSignalError {
		return nil
	}
	maxMsgs := int64(s.MaxOutstandingMessages)
	if maxMsgs <= 0 {
		maxMsgs = int64(pubsub.DefaultPublishSettings.FlowControlSettings.MaxOutstandingMessages)
	}
	f := &flowControl{
		block:   s.LimitExceededBehavior == pubsub.FlowControlBlock,
		count:   semaphore.NewWeighted(maxMsgs),
		maxMsgs: maxMsgs,
	}
	if s.MaxOutstandingBytes > 0 {
		f.maxBytes = int64(s.MaxOutstandingBytes)
		f.bytes = semaphore.NewWeighted(f.maxBytes)
	}
	return f
}

// acquire reserves room for n messages of bytes bytes in all, at once,
// where a message counts as bound(size) bytes. When blocking, a message
// larger than the byte limit waits for the whole limit, so that it can
// still be sent alone; room that can never be had is refused at once. On
// error nothing is reserved.
func (f *flowControl) acquire(ctx context.Context, n, bytes int64) error {
	if !f.try(f.count, n) {
		if !f.block || n > f.maxMsgs {
			return pubsub.ErrFlowControllerMaxOutstandingMessages
		}
		if f.waiting != nil {
			f.waiting()
		}
		if err := f.count.Acquire(ctx, n); err != nil {
			return err
		}
	}
	if f.bytes == nil || bytes == 0 {
		return nil
	}
	if !f.try(f.bytes, bytes) {
		if !f.block || bytes > f.maxBytes {
			f.count.Release(n)
			return pubsub.ErrFlowControllerMaxOutstandingBytes
		}
		if err := f.bytes.Acquire(ctx, bytes); err != nil {
			f.count.Release(n)
			return err
		}
	}
	return nil
}

// try reserves n of s without waiting, reclaiming the room of done
// messages if there is too little (P8).
func (f *flowControl) try(s *semaphore.Weighted, n int64) bool {
	if s.TryAcquire(n) {
		return true
	}
	f.reclaim()
	return s.TryAcquire(n)
}

// release returns the room acquire reserved for a message of size bytes.
func (f *flowControl) release(size int32) {
	f.count.Release(1)
	if f.bytes != nil {
		f.bytes.Release(f.bound(size))
	}
}

// bound is what a message of size bytes counts against the byte limit.
func (f *flowControl) bound(size int32) int64 {
	if f.block {
		return min(int64(size), f.maxBytes)
	}
	return int64(size)
}

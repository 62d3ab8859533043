package subscriber_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/publisher"
	"github.com/keyorder/keyorder/subscriber"
)

// tracing is a faithful fake and an official client that traces, as
// pubsub.ClientConfig{EnableOpenTelemetryTracing: true} makes it, into an
// in-memory exporter installed as the global tracer provider, which is
// where the official client gets its tracer.
type tracing struct {
	exp    *tracetest.InMemoryExporter
	tp     *sdktrace.TracerProvider
	srv    *orderingtest.Server
	client *pubsub.Client
}

func newTracing(t *testing.T) tracing {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	srv := orderingtest.Start(t)
	client, err := pubsub.NewClientWithConfig(context.Background(), harness.Project,
		&pubsub.ClientConfig{EnableOpenTelemetryTracing: true}, srv.ClientOptions()...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	return tracing{exp: exp, tp: tp, srv: srv, client: client}
}

// subscription creates an ordered subscription and publishes n messages
// of one key to its topic through keyorder's publisher, whose official
// client puts each message's trace context in its attributes.
func (tr tracing) subscription(t *testing.T, n int, opts ...subscriber.Option) *subscriber.Subscription {
	t.Helper()
	ctx := testContext(t)
	topic, subID := names()
	s, err := subscriber.CreateWithTopic(ctx, tr.client, topic, subID, opts...)
	require.NoError(t, err)
	p, err := publisher.New(tr.client, topic)
	require.NoError(t, err)
	for range n {
		_, err := p.Publish(ctx, &publisher.Message{Data: []byte("traced")}, publisher.WithOrderingKey("k")).Get(ctx)
		require.NoError(t, err)
	}
	require.NoError(t, p.Close(ctx))
	return s
}

// span returns the span named name (the official client names them
// "<resource ID> <operation>") whose message ID is id.
func (tr tracing) span(t *testing.T, name, id string) tracetest.SpanStub {
	t.Helper()
	for _, s := range tr.exp.GetSpans() {
		if s.Name != name {
			continue
		}
		for _, a := range s.Attributes {
			if a.Key == "messaging.message.id" && a.Value.AsString() == id {
				return s
			}
		}
	}
	t.Fatalf("no span %q for message %s", name, id)
	return tracetest.SpanStub{}
}

func eventNames(s tracetest.SpanStub) []string {
	var names []string
	for _, e := range s.Events {
		names = append(names, e.Name)
	}
	return names
}

// TestTraceContext checks that the official client's per-message trace
// span reaches the handler's ctx, so that the handler's own spans are its
// children and the whole trace runs from the publisher's "create" span to
// the handler; and that S7 still holds for that ctx: it stays live while
// Receive drains, and is cancelled at the drain timeout. It installs a
// global tracer provider, so it does not run in parallel.
func TestTraceContext(t *testing.T) {
	tr := newTracing(t)

	t.Run("the span reaches the handler", func(t *testing.T) {
		s := tr.subscription(t, 1)
		var ( // written by the one handler call, read once Receive has returned
			id      string
			inCall  trace.SpanContext
			handled trace.SpanContext
		)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() {
			done <- s.Receive(ctx, func(hctx context.Context, d *subscriber.Delivery) error {
				id, inCall = d.ID, trace.SpanContextFromContext(hctx)
				_, span := tr.tp.Tracer("handler").Start(hctx, "handle")
				handled = span.SpanContext()
				span.End()
				cancel()
				return nil
			})
		}()
		require.NoError(t, <-done)

		process := tr.span(t, s.Name()[len("projects/"+harness.Project+"/subscriptions/"):]+" process", id)
		require.True(t, inCall.IsValid(), "the handler's ctx carries a span")
		assert.Equal(t, process.SpanContext, inCall, "the official client's process span")
		var child tracetest.SpanStub
		for _, sp := range tr.exp.GetSpans() {
			if sp.SpanContext.SpanID() == handled.SpanID() {
				child = sp
			}
		}
		assert.Equal(t, process.SpanContext.SpanID(), child.Parent.SpanID(), "the handler's span is a child of the process span")
		create := tr.span(t, s.Topic()[len("projects/"+harness.Project+"/topics/"):]+" create", id)
		assert.Equal(t, create.SpanContext.TraceID(), inCall.TraceID(), "one trace from publish to handler")
		assert.Contains(t, eventNames(process), "ack called", "acked after the handler returned (S4)")
	})

	t.Run("drain and cancel", func(t *testing.T) {
		s := tr.subscription(t, 2, subscriber.WithDrainTimeout(100*time.Millisecond))
		running, check := make(chan struct{}), make(chan struct{})
		var (
			mu                    sync.Mutex
			id                    string
			first, drained, ended trace.SpanContext
			liveErr, endErr       error
		)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() {
			done <- s.Receive(ctx, func(hctx context.Context, d *subscriber.Delivery) error {
				mu.Lock()
				id, first = d.ID, trace.SpanContextFromContext(hctx)
				mu.Unlock()
				close(running)
				<-check
				live, span := hctx.Err(), trace.SpanContextFromContext(hctx)
				<-hctx.Done() // the drain timeout
				mu.Lock()
				defer mu.Unlock()
				liveErr, drained = live, span
				endErr, ended = hctx.Err(), trace.SpanContextFromContext(hctx)
				return hctx.Err()
			})
		}()
		<-running
		cancel()
		wctx := testContext(t)
		require.NoError(t, poll(wctx, func() bool { return s.Stats().NackedShutdown >= 1 }), "the queued delivery is nacked")
		close(check)
		require.NoError(t, <-done)

		mu.Lock()
		defer mu.Unlock()
		require.True(t, first.IsValid())
		assert.NoError(t, liveErr, "the handler's ctx stays live while Receive drains (S7)")
		assert.True(t, errors.Is(endErr, context.Canceled), "then the drain timeout cancels it: %v", endErr)
		assert.Equal(t, first, drained, "the span stays in the ctx while draining")
		assert.Equal(t, first, ended, "and once it is cancelled")
		process := tr.span(t, s.Name()[len("projects/"+harness.Project+"/subscriptions/"):]+" process", id)
		assert.Equal(t, process.SpanContext, first)
		assert.Contains(t, eventNames(process), "nack called", "the call cut short is nacked (S7)")
	})
}

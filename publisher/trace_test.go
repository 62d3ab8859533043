package publisher_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"cloud.google.com/go/pubsub/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/publisher"
)

// TestTracing checks that a publisher on a client made with
// EnableOpenTelemetryTracing traces as the official Publisher does: each
// message gets a "<topic ID> create" producer span, ended with the
// message's ID or its error, whose context travels in the message's
// attributes as googclient_traceparent, where the subscriber's client
// extracts it; that the trace context counts against the message's limits
// (P6); and that a client that does not trace adds nothing. It installs a
// global tracer provider, where the official client gets its tracer, so
// it does not run in parallel.
func TestTracing(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	srv, plain := harness.Pstest(t)
	traced, err := pubsub.NewClientWithConfig(context.Background(), harness.Project,
		&pubsub.ClientConfig{EnableOpenTelemetryTracing: true},
		option.WithEndpoint(srv.Addr),
		option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
		option.WithTelemetryDisabled())
	require.NoError(t, err)
	t.Cleanup(func() { _ = traced.Close() })

	// spans returns the ended spans named "<topic> create".
	spans := func(topic string) []tracetest.SpanStub {
		var out []tracetest.SpanStub
		for _, s := range exp.GetSpans() {
			if s.Name == topic+" create" {
				out = append(out, s)
			}
		}
		return out
	}
	attr := func(s tracetest.SpanStub, key string) string {
		for _, a := range s.Attributes {
			if string(a.Key) == key {
				return a.Value.String() // the last one set
			}
		}
		return ""
	}

	t.Run("traced", func(t *testing.T) {
		ctx := testContext(t)
		e := env{srv: srv, client: traced, topic: newTopic(t, traced)}
		p := e.newPublisher(t)
		parentCtx, parent := tp.Tracer("caller").Start(ctx, "caller")
		headers := map[string]string{"a": "1"}
		id, err := p.Publish(parentCtx, &publisher.Message{Data: []byte("traced"), Headers: headers},
			publisher.WithOrderingKey("k")).Get(ctx)
		require.NoError(t, err)
		parent.End()
		assert.Equal(t, map[string]string{"a": "1"}, headers, "the caller's map is not changed")

		created := spans(e.topic)
		require.Len(t, created, 1, "one create span, ended once the result is ready")
		create := created[0]
		assert.Equal(t, trace.SpanKindProducer, create.SpanKind)
		assert.Equal(t, parent.SpanContext().SpanID(), create.Parent.SpanID(), "a child of the caller's span")
		assert.Equal(t, id, attr(create, "messaging.message.id"))
		assert.Equal(t, "k", attr(create, "messaging.gcp_pubsub.message.ordering_key"))
		assert.Equal(t, e.topic, attr(create, "messaging.destination.name"))
		assert.Equal(t, harness.Project, attr(create, "gcp.project_id"))
		assert.Equal(t, "Publish", attr(create, "code.function"))

		stored := e.stored()
		require.Len(t, stored, 1)
		want := fmt.Sprintf("00-%s-%s-01", create.SpanContext.TraceID(), create.SpanContext.SpanID())
		assert.Equal(t, want, stored[0].Attributes["googclient_traceparent"], "the create span's context")
		assert.Equal(t, "1", stored[0].Attributes["a"])
	})

	t.Run("failed", func(t *testing.T) {
		ctx := testContext(t)
		p, err := publisher.New(traced, "missing-topic")
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, p.Close(testContext(t))) })
		_, err = p.Publish(ctx, &publisher.Message{Data: []byte("x")}, publisher.WithOrderingKey("k")).Get(ctx)
		require.Error(t, err)
		created := spans("missing-topic")
		require.Len(t, created, 1)
		assert.Equal(t, codes.Error, created[0].Status.Code, "the span records the failure")
		assert.NotEmpty(t, created[0].Events, "with the error as an event")
	})

	t.Run("counts against the limits", func(t *testing.T) {
		ctx := testContext(t)
		headers := make(map[string]string, publisher.MaxAttributes)
		for i := range publisher.MaxAttributes {
			headers[fmt.Sprintf("h%d", i)] = "v"
		}
		msg := &publisher.Message{Data: []byte("full"), Headers: headers}
		pp := env{srv: srv, client: plain, topic: newTopic(t, plain)}.newPublisher(t, publisher.WithoutStamps())
		_, err := pp.Publish(ctx, msg, publisher.WithOrderingKey("k")).Get(ctx)
		require.NoError(t, err, "100 attributes fit")
		tp := env{srv: srv, client: traced, topic: newTopic(t, traced)}.newPublisher(t, publisher.WithoutStamps())
		_, err = tp.Publish(ctx, msg, publisher.WithOrderingKey("k")).Get(ctx)
		require.ErrorIs(t, err, publisher.ErrTooManyAttributes, "100 and the trace context's do not")
	})

	t.Run("not traced", func(t *testing.T) {
		ctx := testContext(t)
		e := env{srv: srv, client: plain, topic: newTopic(t, plain)}
		p := e.newPublisher(t)
		_, err := p.Publish(ctx, &publisher.Message{Data: []byte("plain"), Headers: map[string]string{"a": "1"}},
			publisher.WithOrderingKey("k")).Get(ctx)
		require.NoError(t, err)
		stored := e.stored()
		require.Len(t, stored, 1)
		for k := range stored[0].Attributes {
			assert.False(t, strings.HasPrefix(k, "googclient_"), "attribute %q", k)
		}
		assert.Empty(t, spans(e.topic), "no span")
	})
}

package publisher

import (
	"context"
	"reflect"
	"strings"

	"cloud.google.com/go/pubsub/v2"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
)

// The official client's names, so that a traced message looks as the
// official Publisher makes it: its tracer (pubsub/v2's trace.go), the
// prefix of its messageCarrier, under which its subscriber extracts the
// trace context, and its publish span's name, "<topic ID> create".
const (
	tracerName       = "cloud.google.com/go/pubsub/v2"
	googclientPrefix = "googclient_"
	createSpanName   = "create"
)

// clientTraces reports whether client was made with
// ClientConfig.EnableOpenTelemetryTracing. The client keeps it in an
// unexported field, enableTracing, which only its own Publisher and
// Subscriber read; reading it once, in New, by reflection, lets a
// publisher trace as the client was told to without an option of its own
// that could disagree with it. A client without such a bool field, from a
// version that renamed it, counts as not tracing.
func clientTraces(client *pubsub.Client) bool {
	f := reflect.ValueOf(client).Elem().FieldByName("enableTracing")
	return f.IsValid() && f.Kind() == reflect.Bool && f.Bool()
}

// createSpan is a traced message's create span, set on its Result: a
// pointer, so that a Result without one costs a word.
type createSpan struct{ trace.Span }

// startCreate starts the create span of msg, a message of the traced
// publisher p, as the official Publisher starts it, and returns the span
// and the trace context fields to add to the message's attributes: nil
// when the span's context is not valid, with no tracer provider installed,
// where the official Publisher injects nothing either.
func (p *Publisher) startCreate(ctx context.Context, msg *Message) (*createSpan, traceFields) {
	id := p.topic[strings.LastIndex(p.topic, "/")+1:]
	size := 0
	if msg != nil {
		size = len(msg.Data)
	}
	ctx, span := otel.Tracer(tracerName).Start(ctx, id+" "+createSpanName,
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			semconv.MessagingMessageID(""), // set when the service gives it
			semconv.MessagingMessageBodySize(size),
			attribute.String("gcp.project_id", p.client.Project()),
			attribute.String("gcp.resource.name", p.topic),
			semconv.MessagingSystemGCPPubsub,
			semconv.MessagingDestinationName(id),
			semconv.CodeFunction("Publish"),
		))
	var tf traceFields
	if span.SpanContext().IsValid() {
		propagation.TraceContext{}.Inject(ctx, &tf)
	}
	return &createSpan{span}, tf
}

// keyed sets the span's ordering key, once Publish has resolved it (P1).
func (s *createSpan) keyed(key string) {
	s.SetAttributes(semconv.MessagingGCPPubsubMessageOrderingKey(key))
}

// end ends the span of a message published with id, or failed with err,
// as the official Publisher ends it.
func (s *createSpan) end(id string, err error) {
	if err != nil {
		s.RecordError(err)
		s.SetStatus(codes.Error, err.Error())
	} else {
		s.SetAttributes(semconv.MessagingMessageID(id))
	}
	s.End()
}

// traceFields is a propagation.TextMapCarrier that gathers the fields
// TraceContext injects, in pairs of key and value, each key prefixed as
// the official client's messageCarrier prefixes it. prepare adds them to
// the message's attributes, where they count against its limits (P6).
type traceFields []string

// Get returns nothing: traceFields only carries a context out.
func (tf *traceFields) Get(string) string { return "" }

// Set adds the field key, prefixed, with val.
func (tf *traceFields) Set(key, val string) {
	*tf = append(*tf, googclientPrefix+key, val)
}

// Keys returns the prefixed keys.
func (tf *traceFields) Keys() []string {
	keys := make([]string, 0, len(*tf)/2)
	for i := 0; i < len(*tf); i += 2 {
		keys = append(keys, (*tf)[i])
	}
	return keys
}

package orderingtest

import (
	"context"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"
)

func (svc subscriberService) CreateSubscription(_ context.Context, req *pubsubpb.Subscription) (*pubsubpb.Subscription, error) {
	if err := checkName(subscriptionName, req.GetName(), "subscription"); err != nil {
		return nil, err
	}
	p := proto.Clone(req).(*pubsubpb.Subscription)
	if err := normalizeSubscription(p); err != nil {
		return nil, err
	}
	s := svc.s
	s.mu.Lock()
	defer s.mu.Unlock()
	t, err := s.topicLocked(p.GetTopic())
	if err != nil {
		return nil, err
	}
	if s.subs[p.GetName()] != nil {
		return nil, status.Errorf(codes.AlreadyExists, "orderingtest: subscription %s already exists", p.GetName())
	}
	if dlp := p.GetDeadLetterPolicy(); dlp != nil && s.topics[dlp.GetDeadLetterTopic()] == nil {
		return nil, status.Errorf(codes.NotFound, "orderingtest: dead-letter topic %s not found", dlp.GetDeadLetterTopic())
	}
	// Output only: the topic's retention, which decides how far back Seek
	// can reach whatever the subscription's own settings.
	p.TopicMessageRetentionDuration = nil
	if t.retention > 0 {
		p.TopicMessageRetentionDuration = durationpb.New(t.retention)
	}
	s.nextSub++
	sub := newSubscription(s, p, t, s.nextSub)
	s.subs[p.GetName()] = sub
	t.subs[sub] = struct{}{} // it receives what is published from now on
	if p.GetPushConfig().GetPushEndpoint() != "" {
		sub.pusher = s.startPusherLocked(sub)
	}
	return proto.Clone(p).(*pubsubpb.Subscription), nil
}

func (svc subscriberService) GetSubscription(_ context.Context, req *pubsubpb.GetSubscriptionRequest) (*pubsubpb.Subscription, error) {
	s := svc.s
	s.mu.Lock()
	defer s.mu.Unlock()
	sub, err := s.subscriptionLocked(req.GetSubscription())
	if err != nil {
		return nil, err
	}
	return proto.Clone(sub.proto).(*pubsubpb.Subscription), nil
}

// updatable lists the subscription fields UpdateSubscription may change.
// Message ordering, the topic and the filter are fixed at creation on the
// service.
var updatable = map[string]bool{
	"ack_deadline_seconds":         true,
	"retain_acked_messages":        true,
	"message_retention_duration":   true,
	"labels":                       true,
	"dead_letter_policy":           true,
	"retry_policy":                 true,
	"expiration_policy":            true,
	"enable_exactly_once_delivery": true,
}

// UpdateSubscription changes the updatable fields the mask names.
func (svc subscriberService) UpdateSubscription(_ context.Context, req *pubsubpb.UpdateSubscriptionRequest) (*pubsubpb.Subscription, error) {
	paths := req.GetUpdateMask().GetPaths()
	if len(paths) == 0 {
		return nil, invalid("update_mask must name at least one field")
	}
	s := svc.s
	s.mu.Lock()
	defer s.mu.Unlock()
	sub, err := s.subscriptionLocked(req.GetSubscription().GetName())
	if err != nil {
		return nil, err
	}
	p := proto.Clone(sub.proto).(*pubsubpb.Subscription)
	dst, src := p.ProtoReflect(), req.GetSubscription().ProtoReflect()
	for _, path := range paths {
		fd := dst.Descriptor().Fields().ByName(protoreflect.Name(path))
		if fd == nil || !updatable[path] {
			return nil, invalid("field %q cannot be updated", path)
		}
		if src.Has(fd) {
			dst.Set(fd, src.Get(fd))
		} else {
			dst.Clear(fd)
		}
	}
	if err := normalizeSubscription(p); err != nil {
		return nil, err
	}
	if dlp := p.GetDeadLetterPolicy(); dlp != nil && s.topics[dlp.GetDeadLetterTopic()] == nil {
		return nil, status.Errorf(codes.NotFound, "orderingtest: dead-letter topic %s not found", dlp.GetDeadLetterTopic())
	}
	sub.proto = p
	return proto.Clone(p).(*pubsubpb.Subscription), nil
}

func (svc subscriberService) ListSubscriptions(_ context.Context, req *pubsubpb.ListSubscriptionsRequest) (*pubsubpb.ListSubscriptionsResponse, error) {
	s := svc.s
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []*pubsubpb.Subscription
	for _, sub := range s.subs {
		all = append(all, sub.proto)
	}
	got, next, err := protoPage(all, req.GetProject(), req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, err
	}
	return &pubsubpb.ListSubscriptionsResponse{Subscriptions: got, NextPageToken: next}, nil
}

// DeleteSubscription removes a subscription; its open streams end with
// NotFound.
func (svc subscriberService) DeleteSubscription(_ context.Context, req *pubsubpb.DeleteSubscriptionRequest) (*emptypb.Empty, error) {
	s := svc.s
	s.mu.Lock()
	defer s.mu.Unlock()
	sub, err := s.subscriptionLocked(req.GetSubscription())
	if err != nil {
		return nil, err
	}
	sub.remove()
	delete(s.subs, req.GetSubscription())
	s.changedLocked()
	return &emptypb.Empty{}, nil
}

// Pull returns up to MaxMessages messages. Unless ReturnImmediately is set it
// waits until it has at least one, the call's context ends or the server
// closes. A key's messages come in one batch at a time, as the service
// allows for Pull.
func (svc subscriberService) Pull(ctx context.Context, req *pubsubpb.PullRequest) (*pubsubpb.PullResponse, error) {
	if req.GetMaxMessages() <= 0 {
		return nil, invalid("max_messages must be positive")
	}
	//lint:ignore SA1019 deprecated, yet still honoured by the service
	immediate := req.GetReturnImmediately()
	s := svc.s
	for {
		s.mu.Lock()
		sub, err := s.subscriptionLocked(req.GetSubscription())
		if err != nil {
			s.mu.Unlock()
			return nil, err
		}
		msgs := sub.fill(sub.pull, int(req.GetMaxMessages()))
		var wait <-chan struct{}
		if len(msgs) > 0 {
			s.changedLocked()
		} else if !immediate {
			wait = sub.availChan()
		}
		s.mu.Unlock()
		if wait == nil {
			return &pubsubpb.PullResponse{ReceivedMessages: msgs}, nil
		}
		if err := await(s, ctx, wait); err != nil {
			return nil, err
		}
	}
}

func (svc subscriberService) Acknowledge(_ context.Context, req *pubsubpb.AcknowledgeRequest) (*emptypb.Empty, error) {
	return svc.s.eachAckID(req.GetSubscription(), req.GetAckIds(), (*subscription).ack)
}

// ModifyAckDeadline extends leases, or nacks them with 0 seconds. The
// official client sends both its lease extensions and its nacks this way.
func (svc subscriberService) ModifyAckDeadline(_ context.Context, req *pubsubpb.ModifyAckDeadlineRequest) (*emptypb.Empty, error) {
	secs := req.GetAckDeadlineSeconds()
	if secs < 0 || secs > maxAckDeadlineSecs {
		return nil, invalid("ack deadline %d s outside [0, %d]", secs, maxAckDeadlineSecs)
	}
	d := time.Duration(secs) * time.Second
	return svc.s.eachAckID(req.GetSubscription(), req.GetAckIds(), func(sub *subscription, id string) AckFailure {
		return sub.modifyAckDeadline(id, d)
	})
}

// eachAckID applies apply to every ack ID of a request to subscription
// name. An exactly-once subscription reports the ack IDs that failed, in
// the service's format; others accept every ack ID.
func (s *Server) eachAckID(name string, ids []string, apply func(*subscription, string) AckFailure) (*emptypb.Empty, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sub, err := s.subscriptionLocked(name)
	if err != nil {
		return nil, err
	}
	var failed map[string]AckFailure
	for _, id := range ids {
		if why := apply(sub, id); why != "" {
			if failed == nil {
				failed = map[string]AckFailure{}
			}
			failed[id] = why
		}
	}
	s.changedLocked()
	if len(failed) > 0 && sub.exactlyOnce() {
		sub.stats.AckFailures += len(failed)
		return nil, ackError(failed)
	}
	return &emptypb.Empty{}, nil
}

// Seek to a time; snapshots are not modelled.
func (svc subscriberService) Seek(_ context.Context, req *pubsubpb.SeekRequest) (*pubsubpb.SeekResponse, error) {
	target, ok := req.GetTarget().(*pubsubpb.SeekRequest_Time)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "orderingtest: only Seek to a time is modelled")
	}
	if !target.Time.IsValid() {
		return nil, invalid("invalid seek time")
	}
	s := svc.s
	s.mu.Lock()
	defer s.mu.Unlock()
	sub, err := s.subscriptionLocked(req.GetSubscription())
	if err != nil {
		return nil, err
	}
	sub.seek(target.Time.AsTime())
	s.changedLocked()
	return &pubsubpb.SeekResponse{}, nil
}

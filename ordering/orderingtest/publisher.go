package orderingtest

import (
	"context"
	"slices"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
)

// deletedTopic is what a subscription's topic reads once the topic is gone.
const deletedTopic = "_deleted-topic_"

func (svc publisherService) CreateTopic(_ context.Context, req *pubsubpb.Topic) (*pubsubpb.Topic, error) {
	if err := checkName(topicName, req.GetName(), "topic"); err != nil {
		return nil, err
	}
	ret, err := retention(req.GetMessageRetentionDuration(), 0, maxTopicRetention, "topic")
	if err != nil {
		return nil, err
	}
	s := svc.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, status.Error(codes.Unavailable, "orderingtest: server closed")
	}
	if s.topics[req.GetName()] != nil {
		return nil, status.Errorf(codes.AlreadyExists, "orderingtest: topic %s already exists", req.GetName())
	}
	p := proto.Clone(req).(*pubsubpb.Topic)
	p.State = pubsubpb.Topic_ACTIVE
	s.topics[p.GetName()] = newTopic(p, ret)
	return proto.Clone(p).(*pubsubpb.Topic), nil
}

func (svc publisherService) GetTopic(_ context.Context, req *pubsubpb.GetTopicRequest) (*pubsubpb.Topic, error) {
	s := svc.s
	s.mu.Lock()
	defer s.mu.Unlock()
	t, err := s.topicLocked(req.GetTopic())
	if err != nil {
		return nil, err
	}
	return proto.Clone(t.proto).(*pubsubpb.Topic), nil
}

func (svc publisherService) ListTopics(_ context.Context, req *pubsubpb.ListTopicsRequest) (*pubsubpb.ListTopicsResponse, error) {
	s := svc.s
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []*pubsubpb.Topic
	for _, t := range s.topics {
		all = append(all, t.proto)
	}
	got, next, err := protoPage(all, req.GetProject(), req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, err
	}
	return &pubsubpb.ListTopicsResponse{Topics: got, NextPageToken: next}, nil
}

func (svc publisherService) ListTopicSubscriptions(_ context.Context, req *pubsubpb.ListTopicSubscriptionsRequest) (*pubsubpb.ListTopicSubscriptionsResponse, error) {
	s := svc.s
	s.mu.Lock()
	defer s.mu.Unlock()
	t, err := s.topicLocked(req.GetTopic())
	if err != nil {
		return nil, err
	}
	var names []string
	for sub := range t.subs {
		names = append(names, sub.proto.GetName())
	}
	slices.Sort(names)
	got, next, err := page(names, req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, err
	}
	return &pubsubpb.ListTopicSubscriptionsResponse{Subscriptions: got, NextPageToken: next}, nil
}

// DeleteTopic removes a topic. As on the service, its subscriptions stay,
// report the topic as "_deleted-topic_", and receive nothing new.
func (svc publisherService) DeleteTopic(_ context.Context, req *pubsubpb.DeleteTopicRequest) (*emptypb.Empty, error) {
	s := svc.s
	s.mu.Lock()
	defer s.mu.Unlock()
	t, err := s.topicLocked(req.GetTopic())
	if err != nil {
		return nil, err
	}
	for sub := range t.subs {
		sub.topic = nil
		sub.proto.Topic = deletedTopic
	}
	delete(s.topics, req.GetTopic())
	return &emptypb.Empty{}, nil
}

// Publish stores a valid request's messages, or none of them. A request
// that breaks a limit fails as it would on the service. Injected faults
// apply after validation: a hold first, then a failure that stores
// nothing, then a failure after the messages are stored.
func (svc publisherService) Publish(ctx context.Context, req *pubsubpb.PublishRequest) (*pubsubpb.PublishResponse, error) {
	s := svc.s
	if d := s.cfg.latency; d > 0 {
		// The request's trip: whatever the outcome, the answer comes d
		// later, and a stored message is deliverable from then on.
		t := time.NewTimer(d)
		defer t.Stop()
		if err := await(s, ctx, t.C); err != nil {
			return nil, err
		}
	}
	if err := validatePublish(req); err != nil {
		return nil, err
	}
	s.mu.Lock()
	_, err := s.topicLocked(req.GetTopic())
	var hold *Fault
	if err == nil {
		hold = s.takeFaultLocked(holdPublish, req.GetMessages()...)
	}
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if hold != nil {
		if err := await(s, ctx, hold.release); err != nil {
			return nil, err
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	t, err := s.topicLocked(req.GetTopic())
	if err != nil {
		return nil, err
	}
	if f := s.takeFaultLocked(failPublish, req.GetMessages()...); f != nil {
		return nil, status.Errorf(f.code, "orderingtest: injected publish failure")
	}
	ids := s.publishLocked(t, req.GetMessages())
	if f := s.takeFaultLocked(loseResponse, req.GetMessages()...); f != nil {
		return nil, status.Errorf(f.code, "orderingtest: injected loss of the response to a stored publish")
	}
	return &pubsubpb.PublishResponse{MessageIds: ids}, nil
}

// await waits for ch to deliver or close, and fails as the call would if
// ctx ends or the server closes first.
func await[T any](s *Server, ctx context.Context, ch <-chan T) error {
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	case <-s.done:
		return status.Error(codes.Unavailable, "orderingtest: server closed")
	}
}

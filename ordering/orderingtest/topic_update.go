package orderingtest

import (
	"context"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// updatableTopic lists the topic fields UpdateTopic changes. The service
// updates others too (the storage policy, the KMS key, schema settings),
// which the fake does not model: naming one is Unimplemented, so that a
// test learns it relied on what the fake cannot show.
var updatableTopic = map[string]bool{
	"labels":                     true,
	"message_retention_duration": true,
}

// UpdateTopic changes the labels and the message retention of a topic, as
// the mask names them; a field named in the mask but unset in the request
// is cleared, as on the service (no retention, no labels). A new
// retention applies at once to every message the topic holds: a message
// published before the change can be sought back to if it is younger than
// the new retention.
func (svc publisherService) UpdateTopic(_ context.Context, req *pubsubpb.UpdateTopicRequest) (*pubsubpb.Topic, error) {
	paths := req.GetUpdateMask().GetPaths()
	if len(paths) == 0 {
		return nil, invalid("update_mask must name at least one field")
	}
	s := svc.s
	s.mu.Lock()
	defer s.mu.Unlock()
	t, err := s.topicLocked(req.GetTopic().GetName())
	if err != nil {
		return nil, err
	}
	p := proto.Clone(t.proto).(*pubsubpb.Topic)
	dst, src := p.ProtoReflect(), req.GetTopic().ProtoReflect()
	for _, path := range paths {
		fd := dst.Descriptor().Fields().ByName(protoreflect.Name(path))
		switch {
		case fd == nil || path == "name":
			return nil, invalid("field %q cannot be updated", path)
		case !updatableTopic[path]:
			return nil, status.Errorf(codes.Unimplemented, "orderingtest: UpdateTopic of %q is not modelled", path)
		case src.Has(fd):
			dst.Set(fd, src.Get(fd))
		default:
			dst.Clear(fd)
		}
	}
	ret, err := retention(p.GetMessageRetentionDuration(), 0, maxTopicRetention, "topic")
	if err != nil {
		return nil, err
	}
	t.proto, t.retention = p, ret
	s.changedLocked()
	return proto.Clone(p).(*pubsubpb.Topic), nil
}

package subscriber

import (
	"net/http"
	"sync"

	"cloud.google.com/go/pubsub/v2"
)

// pushHints logs, once each per endpoint, what a push request tells of a
// server that does not push as the service does, so that an endpoint that
// answers 401 to everything, or runs keys unordered, says why. Google's
// emulator, for one, sends neither a token nor the ordering key.
type pushHints struct {
	token, key sync.Once
}

// hintToken logs a hint, the first time, when req carries no token and
// the endpoint needs one (WithPushAuth).
func (d *pushEndpoint) hintToken(req *http.Request) {
	if d.r.s.push.email == "" || req.Header.Get("Authorization") != "" {
		return
	}
	d.hints.token.Do(func() {
		d.r.obs.log.Warn("keyorder/subscriber: a push request carries no token; every such request is refused 401",
			"hint", "the server does not sign its pushes (Google's emulator does not): on it, make the subscription with WithUnauthenticatedPush; on Pub/Sub, give the push subscription the service account of WithPushAuth")
	})
}

// hintKey logs a hint, the first time, when a push to an ordered
// subscription carries no ordering key.
func (d *pushEndpoint) hintKey(m *pubsub.Message) {
	if !d.r.s.ordered || m.OrderingKey != "" {
		return
	}
	d.hints.key.Do(func() {
		d.r.obs.log.Info("keyorder/subscriber: a push to an ordered subscription carries no ordering key; it runs unordered",
			"message_id", m.ID,
			"hint", "if it was published with one, the server does not push ordering keys (Google's emulator does not), and keys cannot be kept in order through it")
	})
}

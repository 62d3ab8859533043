package main

import (
	"net"
	"net/http"

	"github.com/keyorder/keyorder/subscriber"
	"github.com/keyorder/keyorder/subscriber/statuspage"
)

// statusPath is where the status page is mounted, as pprof's is under
// /debug/pprof/.
const statusPath = "/debug/keyorder/"

// serveStatus serves sub's status page on addr until stop is called, and
// returns its URL. stop returns once the server's goroutine has exited.
func serveStatus(addr string, sub *subscriber.Subscription) (url string, stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, err
	}
	mux := http.NewServeMux()
	mux.Handle(statusPath, http.StripPrefix(statusPath[:len(statusPath)-1], statuspage.Handler(sub)))
	srv := &http.Server{Handler: mux}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln) // http.ErrServerClosed once stop is called
	}()
	return "http://" + ln.Addr().String() + statusPath, func() {
		_ = srv.Close()
		<-done
	}, nil
}

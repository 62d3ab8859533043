package orderingtest

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
)

// A Link is a TCP relay in front of a server, for tests of a client
// whose server is gone or hangs: clients dial Link.Addr instead of the
// server's, and the test breaks the link between them. It relays bytes
// and knows nothing of gRPC, so it stands in front of any server: this
// package's, pstest or Google's emulator.
//
//   - Hang stops every byte both ways, on the connections open and on new
//     ones, which are accepted: a server that is up but answers nothing,
//     or a network that drops packets. No call fails; each waits for its
//     deadline.
//   - Cut closes every connection and every new one at once: a server
//     that is gone. Calls fail with Unavailable, which the official
//     client retries until its deadline.
//   - Restore undoes either: hung bytes flow again; after a cut, new
//     connections reach the server.
//
// Its methods are safe for concurrent use. Close it when done; StartLink
// does that at the end of a test.
type Link struct {
	// Addr is the "host:port" clients dial.
	Addr string

	target string
	lis    net.Listener
	wg     sync.WaitGroup // the accept loop and every relay; Close waits

	mu     sync.Mutex // guards everything below
	state  linkState
	resume chan struct{}         // closed, and replaced, when a hang ends
	conns  map[net.Conn]struct{} // both ends of every open relay
	closed bool
}

type linkState int

const (
	linkUp linkState = iota
	linkHung
	linkCut
)

// NewLink starts a link to target, a "host:port", on a free port of
// 127.0.0.1. It does not dial target until a client connects.
func NewLink(target string) (*Link, error) {
	lis, err := net.Listen("tcp", DefaultAddress)
	if err != nil {
		return nil, fmt.Errorf("orderingtest: listen: %w", err)
	}
	l := &Link{Addr: lis.Addr().String(), target: target, lis: lis, resume: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	l.wg.Add(1)
	go l.accept()
	return l, nil
}

// StartLink starts a link to target for the length of a test, failing tb
// if it cannot, and closes it when tb ends.
func StartLink(tb testing.TB, target string) *Link {
	tb.Helper()
	l, err := NewLink(target)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = l.Close() })
	return l
}

// Hang stops every byte between clients and the server until Restore or
// Close; connections stay open.
func (l *Link) Hang() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state == linkUp {
		l.state = linkHung
	}
}

// Cut closes every connection between clients and the server, and every
// new one at once, until Restore.
func (l *Link) Cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.wakeLocked()
	l.state = linkCut
	l.closeConnsLocked()
}

// Restore lets bytes flow again after Hang, and connections through
// after Cut.
func (l *Link) Restore() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.wakeLocked()
	l.state = linkUp
}

// Close stops the link: it closes every connection and the listener, and
// returns once every goroutine it started has exited. It is idempotent.
func (l *Link) Close() error {
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		close(l.resume)
		l.closeConnsLocked()
	}
	l.mu.Unlock()
	err := l.lis.Close()
	l.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// wakeLocked wakes the relays waiting out a hang, to look at the state
// again.
func (l *Link) wakeLocked() {
	if l.state == linkHung && !l.closed {
		close(l.resume)
		l.resume = make(chan struct{})
	}
}

func (l *Link) closeConnsLocked() {
	for c := range l.conns {
		_ = c.Close()
	}
	clear(l.conns)
}

// accept relays each connection to the target until the listener closes.
func (l *Link) accept() {
	defer l.wg.Done()
	for {
		c, err := l.lis.Accept()
		if err != nil {
			return
		}
		l.mu.Lock()
		cut := l.state == linkCut || l.closed
		l.mu.Unlock()
		if cut {
			_ = c.Close()
			continue
		}
		l.wg.Add(1)
		go l.relay(c)
	}
}

// relay dials the target for the client connection c and copies bytes
// both ways until either side closes or the link cuts them.
func (l *Link) relay(c net.Conn) {
	defer l.wg.Done()
	s, err := net.Dial("tcp", l.target)
	if err != nil {
		_ = c.Close()
		return
	}
	if !l.track(c, s) {
		return
	}
	var both sync.WaitGroup
	both.Add(2)
	go func() { defer both.Done(); l.pipe(s, c) }()
	go func() { defer both.Done(); l.pipe(c, s) }()
	both.Wait()
	l.mu.Lock()
	delete(l.conns, c)
	delete(l.conns, s)
	l.mu.Unlock()
}

// track registers both ends of a relay, or closes them and reports false
// if the link was cut or closed meanwhile.
func (l *Link) track(c, s net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state == linkCut || l.closed {
		_ = c.Close()
		_ = s.Close()
		return false
	}
	l.conns[c], l.conns[s] = struct{}{}, struct{}{}
	return true
}

// pipe copies from src to dst, each chunk once the link is not hung, and
// closes both when either fails.
func (l *Link) pipe(dst, src net.Conn) {
	defer func() { _ = dst.Close(); _ = src.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !l.pass() {
			return
		}
		if _, werr := dst.Write(buf[:n]); werr != nil {
			return
		}
		if err != nil {
			return
		}
	}
}

// pass waits while the link hangs, and reports whether the bytes may go
// on: false once it is cut or closed.
func (l *Link) pass() bool {
	for {
		l.mu.Lock()
		state, resume, closed := l.state, l.resume, l.closed
		l.mu.Unlock()
		switch {
		case closed || state == linkCut:
			return false
		case state == linkUp:
			return true
		}
		<-resume
	}
}

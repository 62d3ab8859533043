package subscriber

import "time"

// Push's side of the lanes. A push endpoint runs no turns, since the
// service pushes a key's messages one at a time, but it keeps each call in
// its key's lane while it runs, so that what Stats and HeldKeys read of a
// push call (running, keys, the oldest age, the held-key record) is what
// they read of a pull delivery's, and the held-key record notes the
// verdict through the same note as the pull path.

// pushed ends j's call in the lane, which the call path judged v: the
// held-key record notes v, and the lane goes once it holds nothing. It
// returns the key events to tell.
func (l *lane) pushed(j *job, v verdict) effects {
	var fx effects
	now := time.Now()
	l.sh.mu.Lock()
	defer l.sh.mu.Unlock()
	l.running = nil
	if v.took > 0 {
		l.pace = ewma(l.pace, v.took)
		l.stats.ran(v.took)
	}
	l.note(j, v, now, &fx)
	l.release()
	return fx
}

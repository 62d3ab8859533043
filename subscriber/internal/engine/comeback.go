package engine

// A comeback is the way back of a held key's messages: the failed one and
// the tail the hold sent back after it, in the order this process first
// received them, and those it kept in between. The hold's wait lasts until
// every one sent back has come back, so that they run in that order
// whatever order the server sends them back in: the service sends a key's
// tail again in order, but Google's emulator sends only what was nacked,
// in the order of the nack request, which the official client makes from
// a map.
type comeback struct {
	pos   map[string]int // a message's place, by ID
	slots []*Job         // in order; nil for one still away
	away  int            // how many are still away
}

func newComeback(failed string) *comeback {
	c := &comeback{pos: map[string]int{}}
	c.send(failed)
	return c
}

// send gives id, sent back, the next place.
func (c *comeback) send(id string) {
	if _, ok := c.pos[id]; ok {
		return
	}
	c.pos[id] = len(c.slots)
	c.slots = append(c.slots, nil)
	c.away++
}

// keep gives j, kept here, the next place.
func (c *comeback) keep(j *Job) {
	c.pos[j.D.ID] = len(c.slots)
	c.slots = append(c.slots, j)
}

// back puts j, a delivery of a message that has a place, in it: queued, or
// joined to the delivery there. A message with no place is Held.
func (c *comeback) back(j *Job) Outcome {
	i, ok := c.pos[j.D.ID]
	switch {
	case !ok:
		return Held
	case c.slots[i] != nil:
		c.slots[i].join(j.Msg, false)
		return Joined
	}
	c.slots[i] = j
	c.away--
	return Queued
}

// held returns the jobs waiting on the way back.
func (c *comeback) held() int {
	n := 0
	for _, j := range c.slots {
		if j != nil {
			n++
		}
	}
	return n
}

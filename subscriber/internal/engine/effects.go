package engine

// Effects collects what a change to a lane decided and must be done once
// its shard's mutex is released: acks and nacks, which call into the
// official client, the lane's next turn, and events for user callbacks,
// which may block, panic or exit the goroutine.
type Effects struct {
	settle []settlement
	turn   bool
	events []KeyEvent
}

// settlement is the fate of one job: acked, or nacked for a reason.
type settlement struct {
	j   *Job
	out Outcome
}

func (fx *Effects) Add(j *Job, out Outcome) {
	fx.settle = append(fx.settle, settlement{j, out})
}

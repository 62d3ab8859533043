package structure

import (
	"fmt"
	"go/ast"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The way of one delivery: the functions of subscriber/... and workers/
// that one keyed message, unstamped, that succeeds at its first call,
// passes through, in call order, on the subscription's defaults (no
// parking, no exactly-once). A name is "dir.Func" or "dir.Type.Method".
// The lists are read from the code by hand: when the way changes, a
// reviewer updates them; when a function moves to another file, the
// figure follows by itself. DESIGN.md's "The way of one delivery" gives
// the same ways in short.

// pullWay is a pull delivery's way, from the official client's Receive
// callback to its ack.
var pullWay = []string{
	// The official client's callback goroutine.
	"subscriber/internal/engine.Engine.Deliver",
	"subscriber/internal/engine.Engine.arrived",
	"subscriber/internal/engine.newJob",
	"subscriber/internal/engine.IsRedriven",
	"subscriber/internal/engine.deliveryOf",
	"subscriber/internal/engine.takeStamp",
	"subscriber/internal/engine.Engine.processedBefore",
	"subscriber/internal/engine.processed.contains",
	"subscriber/internal/engine.Range.admits",
	"subscriber/internal/engine.Range.Active",
	"subscriber/internal/engine.lanes.with",
	"subscriber/internal/engine.laneHash",
	"subscriber/internal/engine.laneShard.keyLane",
	"subscriber/internal/engine.Lane.accept",
	"subscriber/internal/engine.Engine.Stopped",
	"subscriber/internal/engine.Lane.holdsNothing",
	"subscriber/internal/engine.attempts.prior",
	"subscriber/internal/engine.Lane.closeRoomGap",
	"subscriber/internal/engine.room.admit",
	"subscriber/internal/engine.Lane.place",
	"subscriber/internal/engine.ordersBySeq",
	"subscriber/internal/engine.Engine.take",
	"subscriber/internal/engine.room.pressed",
	"subscriber/internal/engine.Lane.next",
	"subscriber/internal/engine.Lane.release",
	"subscriber/internal/engine.Engine.apply",
	"workers.Pool.SubmitTask",
	"workers.Pool.index",
	"workers.Pool.shardOf",
	"workers.shard.get",
	"workers.Pool.submit",
	"workers.ring.full",
	"workers.ring.push",
	"workers.Pool.makeReady",
	// A runner of the pool.
	"workers.Pool.run",
	"workers.Pool.take",
	"workers.ring.len",
	"workers.partition.start",
	"workers.ring.pop",
	"workers.partition.admitLocked",
	"workers.waitList.pop",
	"workers.invoke",
	"subscriber/internal/engine.Lane.Run",
	"subscriber/internal/engine.Lane.begin",
	"subscriber/internal/engine.Job.deliveryAttempt",
	"subscriber/internal/engine.Engine.Call",
	"subscriber/internal/engine.Engine.checkSequence",
	"subscriber/internal/engine.Engine.sequenced",
	"subscriber/internal/engine.Job.lifeOr",
	"subscriber/internal/engine.InvokeHandler",
	"subscriber/internal/engine.Engine.judge",
	"subscriber/internal/engine.recorder.handled",
	"subscriber/internal/engine.Engine.conclude",
	"subscriber/internal/engine.processed.add",
	"subscriber/internal/engine.Engine.processedStamp",
	"subscriber/internal/engine.Lane.Settle",
	"subscriber/internal/engine.Lane.Update",
	"subscriber/internal/engine.ewma",
	"subscriber/internal/engine.laneStats.ran",
	"subscriber/internal/engine.Lane.note",
	"subscriber/internal/engine.Effects.Add",
	"subscriber/internal/engine.Engine.settle",
	"subscriber/internal/engine.Outcome.Acks",
	"subscriber/internal/engine.Engine.ack",
	"subscriber/internal/engine.ending.acked",
	"subscriber/internal/engine.room.give",
	"subscriber/internal/engine.Engine.Count",
	"subscriber/internal/engine.recorder.settled",
	"workers.Pool.after",
	"workers.Pool.done1",
	"workers.shard.release",
	"workers.partition.idle",
	"workers.ring.reset",
}

// pushWay is a push request's way, from the HTTP handler to its answer:
// with push authentication (its token's key known already), wrapped.
var pushWay = []string{
	// The request's goroutine.
	"subscriber/internal/push.Endpoint.ServeHTTP",
	"subscriber/internal/push.Endpoint.hintToken",
	"subscriber/internal/push.Endpoint.authorize",
	"subscriber/internal/push.tokenChecker.check",
	"subscriber/internal/push.tokenKeyID",
	"subscriber/internal/push.decodeObject",
	"subscriber/internal/push.validKeyID",
	"subscriber/internal/push.tokenChecker.get",
	"subscriber/internal/push.tokenChecker.knownKey",
	"subscriber/internal/push.validate",
	"subscriber/internal/push.checkTimes",
	"subscriber/internal/push.checkClaims",
	"subscriber/internal/push.decodePush",
	"subscriber/internal/push.decodeEnvelope",
	"subscriber/internal/push.decodeObject",
	"subscriber/internal/push.decodeStrings",
	"subscriber/internal/push.pushEnvelope.message",
	"subscriber/internal/push.pushEnvelope.check",
	"subscriber/internal/push.checkAttributes",
	"subscriber/internal/push.Endpoint.hintKey",
	"subscriber/internal/push.Endpoint.run",
	"subscriber/internal/push.Endpoint.enter",
	"subscriber/internal/push.keyGate.enter",
	"subscriber/internal/push.Endpoint.push",
	"subscriber/internal/engine.PushDoor.Arrive",
	"subscriber/internal/engine.Engine.arrived",
	"subscriber/internal/engine.newJob",
	"subscriber/internal/engine.IsRedriven",
	"subscriber/internal/engine.deliveryOf",
	"subscriber/internal/engine.takeStamp",
	"subscriber/internal/engine.Job.deliveryAttempt",
	"subscriber/internal/engine.PushDoor.Call",
	"subscriber/internal/engine.PushDoor.callWaiting",
	"subscriber/internal/engine.PushDoor.callInLane",
	"subscriber/internal/engine.PushDoor.running",
	"subscriber/internal/engine.lanes.with",
	"subscriber/internal/engine.laneShard.keyLane",
	"subscriber/internal/engine.Lane.holdsNothing",
	// The call's goroutine.
	"subscriber/internal/engine.Engine.Call",
	"subscriber/internal/engine.Engine.Stopped",
	"subscriber/internal/engine.Engine.processedBefore",
	"subscriber/internal/engine.processed.contains",
	"subscriber/internal/engine.Engine.checkSequence",
	"subscriber/internal/engine.Engine.sequenced",
	"subscriber/internal/engine.attempts.prior",
	"subscriber/internal/engine.Job.lifeOr",
	"subscriber/internal/engine.InvokeHandler",
	"subscriber/internal/engine.Engine.judge",
	"subscriber/internal/engine.recorder.handled",
	"subscriber/internal/engine.Engine.conclude",
	"subscriber/internal/engine.processed.add",
	"subscriber/internal/engine.Engine.processedStamp",
	"subscriber/internal/engine.laneCall.Settle",
	"subscriber/internal/engine.Lane.pushed",
	"subscriber/internal/engine.Lane.note",
	"subscriber/internal/engine.Lane.release",
	"subscriber/internal/engine.Engine.apply",
	// The request's goroutine again, which counts and answers.
	"subscriber/internal/engine.Outcome.ForGood",
	"subscriber/internal/engine.Engine.Count",
	"subscriber/internal/engine.recorder.settled",
	"subscriber/internal/engine.Outcome.Acks",
}

// maxWayFiles is the bound on the files each way crosses.
const maxWayFiles = 8

// funcFiles maps every function of files, as "dir.Func" or
// "dir.Type.Method", to the file that declares it.
func funcFiles(files []file) map[string]string {
	where := map[string]string{}
	for _, f := range files {
		for _, d := range f.ast.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			name := f.pkg + "." + fd.Name.Name
			if typ := receiverType(fd); typ != "" {
				name = f.pkg + "." + typ + "." + fd.Name.Name
			}
			where[name] = f.name
		}
	}
	return where
}

// TestDeliveryWays logs how many files each way crosses, and fails if one
// crosses more than maxWayFiles. A name of a way that the code no
// longer declares fails the test: the list must follow the code, or the
// figure would shrink unseen.
func TestDeliveryWays(t *testing.T) {
	where := funcFiles(append(parseTree(t, "subscriber"), parseTree(t, "workers")...))
	for _, way := range []struct {
		name  string
		steps []string
	}{{"pull delivery", pullWay}, {"push request", pushWay}} {
		perFile := map[string]int{}
		for _, step := range way.steps {
			f, ok := where[step]
			require.True(t, ok, "%s: %s is declared nowhere: update the list", way.name, step)
			perFile[f]++
		}
		files := slices.Sorted(maps.Keys(perFile))
		parts := make([]string, len(files))
		inWorkers := 0
		for i, f := range files {
			parts[i] = fmt.Sprintf("%s (%d)", f, perFile[f])
			if strings.HasPrefix(f, "workers/") {
				inWorkers++
			}
		}
		t.Logf("%s: %d functions in %d files, %d of subscriber/... and %d of workers/ (target %d): %s",
			way.name, len(way.steps), len(files), len(files)-inWorkers, inWorkers, maxWayFiles,
			strings.Join(parts, ", "))
		assert.LessOrEqual(t, len(files), maxWayFiles, "the files a %s crosses", way.name)
	}
}

// Package parking runs WithParking for subscriber's doors: the control
// log's follower and the barrier's markers (Start, Parking), the moves of a
// parked key's messages to the parking topic, on flights for the lanes and
// at once for a push, releases run in a Receive (releaseRun) or asked for
// through the log (RequestRelease, WithdrawRelease), and the control log
// kept for a push endpoint (Push). It implements the engine's Parking and
// ReleaseDoor interfaces and push's Parking and Parked, and reaches the
// engine only through the door the facade gives it (engine.ParkingDoor) and
// the types its hooks pass (Job, ParkCause). It writes none of the engine's
// fields. The facade, subscriber, keeps the public names (WithParking,
// ParkedKey, the Attr constants, the errors, and the methods Parked,
// Release, RequestRelease and WithdrawRelease, thin calls into this
// package) and the setup of the topics.
package parking

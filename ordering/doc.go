// Package ordering holds the rules every keyorder package shares: the
// header that names an ordering key, the service's key limits, how a key is
// resolved for a message, and the stable hash that pins a key to a worker
// partition.
//
// It does no I/O and starts no goroutines. Rule numbers (P1, S3, ...) refer
// to the ordering contract in the project's DESIGN.md.
//
// # Keys
//
// An ordering key groups messages that must be delivered in the order they
// were published: a customer, an account, a database row. The empty key
// means "unordered": such messages are published and delivered in parallel.
//
// # Resolution (P1)
//
// A message's key is the first non-empty of the key given on the call, the
// [Header] header of the message, and the publisher's default key. See
// [Resolve].
//
// # Partitions (S3)
//
// [Partition] maps a key to one of n partitions with a pinned hash, so the
// same key lands on the same partition in every process and every release.
//
// # Stamps
//
// A keyed message may carry a [Stamp]: its producer's ID and its number in
// that producer's sequence for the key, as the one attribute
// [StampAttribute] ("3.42@orders-api#k3j..."), or, as keyorder wrote it
// before, the two attributes [ProducerAttribute] and [SeqAttribute]. A
// subscriber uses it to tell a copy of a message stored twice under two
// message IDs from a new one, and to see numbers that never arrived.
// [Stamp.Put] writes a stamp, [ParseStamp] reads it in either form,
// [DeleteStamp] takes it out of a message's attributes, and [Stamp.Size]
// is its cost in bytes against the service's limits. A producer that
// counts a key afresh starts a new epoch of its numbers, so that none is
// reused: [MakeSeq], [SplitSeq] and [FormatSeq].
//
// A stamp proves nothing by itself: whoever may publish to the topic can
// write one. [StampKeys] signs a stamp, binding it to the message's
// ordering key and data, under a key that producers and consumers share,
// and verifies it against any of several keys, so that keys rotate.
package ordering

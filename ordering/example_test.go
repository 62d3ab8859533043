package ordering_test

import (
	"errors"
	"fmt"
	"strings"

	"github.com/keyorder/keyorder/ordering"
)

func ExampleResolve() {
	headers := map[string]string{ordering.Header: "customer-7"}

	fmt.Println(ordering.Resolve("customer-1", headers, "fallback")) // the call option wins
	fmt.Println(ordering.Resolve("", headers, "fallback"))           // then the header
	fmt.Println(ordering.Resolve("", nil, "fallback"))               // then the default
	fmt.Printf("%q\n", ordering.Resolve("", nil, ""))                // unordered
	// Output:
	// customer-1
	// customer-7
	// fallback
	// ""
}

func ExampleValidate() {
	err := ordering.Validate(strings.Repeat("k", 2000))
	fmt.Println(errors.Is(err, ordering.ErrKeyTooLong))
	fmt.Println(ordering.Validate(""))
	// Output:
	// true
	// <nil>
}

func ExamplePartition() {
	for _, key := range []string{"customer-1", "customer-2", "customer-1"} {
		fmt.Println(key, "->", ordering.Partition(key, 4))
	}
	// Output:
	// customer-1 -> 2
	// customer-2 -> 1
	// customer-1 -> 2
}

func ExampleParseStamp() {
	attrs := map[string]string{"source": "checkout"}
	ordering.Stamp{Producer: "checkout-1", Seq: ordering.MakeSeq(3, 42)}.Put(attrs)
	fmt.Println(attrs[ordering.StampAttribute])

	s, err := ordering.ParseStamp(attrs)
	fmt.Println(s.Producer, ordering.FormatSeq(s.Seq), err)

	// The older form, two attributes, is still read.
	s, err = ordering.ParseStamp(map[string]string{ordering.ProducerAttribute: "checkout-1", ordering.SeqAttribute: "42"})
	fmt.Println(s.Producer, ordering.FormatSeq(s.Seq), err)

	s, err = ordering.ParseStamp(map[string]string{"source": "checkout"})
	fmt.Println(s.IsZero(), err) // not stamped

	_, err = ordering.ParseStamp(map[string]string{ordering.StampAttribute: "3.042@checkout-1"})
	fmt.Println(errors.Is(err, ordering.ErrBadStamp))
	// Output:
	// 3.42@checkout-1
	// checkout-1 3.42 <nil>
	// checkout-1 0.42 <nil>
	// true <nil>
	// true
}

// A publisher that starts counting a key afresh takes a new epoch, so that
// its numbers keep increasing and none is reused.
func ExampleSplitSeq() {
	first := ordering.MakeSeq(5, 1) // epoch 5, the key's first message
	later := ordering.MakeSeq(9, 1) // the key counted afresh, in epoch 9
	fmt.Println(first, later, later > first)
	epoch, n := ordering.SplitSeq(later)
	fmt.Println(epoch, n)
	// Output:
	// 21474836481 38654705665 true
	// 9 1
}

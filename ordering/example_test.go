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

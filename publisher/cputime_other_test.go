//go:build !unix

package publisher_test

import "time"

// processCPU returns 0: the CPU time is not measured on this system.
func processCPU() time.Duration { return 0 }

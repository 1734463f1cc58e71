package vm

// The boots' lanes, the pure part: how many guests boot at once and in
// which order (TestVM runs the variants through runInLanes).

import (
	"fmt"
	"strconv"
	"sync"

	"github.com/cgdelegate/cgdelegate/integration/internal/variant"
)

// vmLanes is how many guests may boot at once (CGD_VM_LANES; 2 when
// unset). Most boots' qemu uses 1.2 to 1.6 of this machine's two cores,
// so two of them side by side finish sooner than one after the other;
// variant.Variant.BootsAlone says which boots never share the machine.
func vmLanes(env string) (int, error) {
	if env == "" {
		return 2, nil
	}
	n, err := strconv.Atoi(env)
	if err != nil || n < 1 || n > 8 {
		return 0, fmt.Errorf("CGD_VM_LANES=%q: want a number of guests from 1 to 8", env)
	}
	return n, nil
}

// runInLanes calls run for every variant, in order, up to lanes at once:
// a variant that boots alone waits until the others have ended and holds
// every lane. It returns when every call has returned.
func runInLanes(lanes int, vs []variant.Variant, run func(variant.Variant)) {
	free := make(chan struct{}, lanes)
	for range lanes {
		free <- struct{}{}
	}
	var wg sync.WaitGroup
	for _, v := range vs {
		n := 1
		if v.BootsAlone() || lanes == 1 {
			n = lanes
		}
		for range n {
			<-free
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				for range n {
					free <- struct{}{}
				}
			}()
			run(v)
		}()
	}
	wg.Wait()
}

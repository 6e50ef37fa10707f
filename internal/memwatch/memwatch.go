// Package memwatch measures the peak heap of a piece of work, or the peak resident set of a
// process, for benchmarks that report memory beside speed.
package memwatch

import (
	"runtime"
	"sync"
	"time"
)

// Peak runs f and returns the largest heap in use, in bytes, seen while it ran, above what was in
// use before it started.
func Peak(f func()) uint64 {
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	var peak uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		var ms runtime.MemStats
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				runtime.ReadMemStats(&ms)
				peak = max(peak, ms.HeapInuse)
			}
		}
	})
	f()
	close(stop)
	wg.Wait()
	return peak - min(peak, base.HeapInuse)
}

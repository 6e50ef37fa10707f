package memwatch

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"
)

// RunPeakRSS runs cmd to its end and returns its own peak resident set, in bytes: the high-water
// mark (VmHWM of /proc/PID/status) read every 10 ms while it runs, the last read at most that
// long before it exits. Not the ru_maxrss wait returns: Linux carries into it, through exec, the
// RSS of the process that started it as it was at the fork, so every command a large benchmark
// starts would report the benchmark's memory.
func RunPeakRSS(cmd *exec.Cmd) (uint64, error) {
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	path := fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)
	var peak uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			if hwm, err := highWater(path); err == nil {
				peak = max(peak, hwm)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	})
	err := cmd.Wait()
	close(stop)
	wg.Wait()
	return peak, err
}

// SelfPeakRSS is this process's peak resident set, in bytes (VmHWM; see RunPeakRSS for why not
// getrusage).
func SelfPeakRSS() (uint64, error) { return highWater("/proc/self/status") }

// highWater reads VmHWM from a /proc status file, in bytes.
func highWater(path string) (uint64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		rest, ok := bytes.CutPrefix(sc.Bytes(), []byte("VmHWM:"))
		if !ok {
			continue
		}
		kib, err := strconv.ParseUint(string(bytes.TrimSuffix(bytes.TrimSpace(rest), []byte(" kB"))), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: VmHWM %q: %w", path, rest, err)
		}
		return kib << 10, nil
	}
	return 0, fmt.Errorf("%s: no VmHWM (the process has ended)", path)
}

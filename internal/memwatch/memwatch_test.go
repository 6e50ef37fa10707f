package memwatch

import (
	"os"
	"os/exec"
	"testing"
)

func TestPeakSeesAnAllocation(t *testing.T) {
	var keep []byte
	peak := Peak(func() {
		keep = make([]byte, 64<<20)
		for i := range keep {
			keep[i] = 1
		}
		for range 3 {
			busy := make([]byte, 1<<20)
			_ = busy
		}
	})
	if peak < 32<<20 {
		t.Fatalf("peak %d bytes while 64 MiB were held", peak)
	}
	_ = keep[0]
}

// TestRunPeakRSSIsTheCommandsOwn: a small command started by a process holding 256 MiB reports
// its own few MiB, not the starter's (which ru_maxrss would).
func TestRunPeakRSSIsTheCommandsOwn(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("no /proc here")
	}
	held := make([]byte, 256<<20)
	for i := range held {
		held[i] = 1
	}
	cmd := exec.Command("sleep", "0.2")
	peak, err := RunPeakRSS(cmd)
	if err != nil {
		t.Fatal(err)
	}
	self, err := SelfPeakRSS()
	if err != nil {
		t.Fatal(err)
	}
	if peak == 0 || peak > 64<<20 {
		t.Fatalf("sleep's peak RSS %d MiB; want a few MiB (this process holds %d MiB)", peak>>20, self>>20)
	}
	if self < 256<<20 {
		t.Fatalf("this process's peak RSS %d MiB; want at least the 256 MiB it holds", self>>20)
	}
	held[len(held)-1] = 2
}

package memwatch

import "testing"

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

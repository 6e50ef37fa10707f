package integration

import (
	"bytes"
	"fmt"
	"os/exec"

	"github.com/ferrykube/ferry/internal/memwatch"
)

// runPeakRSS runs a benchmark's ferry command and returns its stdout (and stderr too, when
// combined) and the process's own peak RSS in KiB (memwatch.RunPeakRSS: not ru_maxrss, which
// reports the benchmark's memory for every command it starts).
func runPeakRSS(cmd *exec.Cmd, combined bool) ([]byte, int64, error) {
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if combined {
		cmd.Stderr = &out
	}
	peak, err := memwatch.RunPeakRSS(cmd)
	if err != nil && !combined {
		err = fmt.Errorf("%w: %s", err, stderr.Bytes())
	}
	return out.Bytes(), int64(peak >> 10), err
}

package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"

	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/spf13/pflag"
)

// profileOptions are kubectl's --profile and --profile-output (k8s.io/kubectl/pkg/cmd/profiling.go):
// a profile of one command, for reports of a slow or large run.
type profileOptions struct {
	name   string
	output string
	stop   func() error
}

func (o *profileOptions) addFlags(flags *pflag.FlagSet) {
	flags.StringVar(&o.name, "profile", "none", "name of a profile to capture: none, cpu or heap")
	flags.StringVar(&o.output, "profile-output", "profile.pprof", "file to write the profile to")
}

// start begins the profile; finish writes it.
func (o *profileOptions) start() error {
	switch o.name {
	case "none":
		return nil
	case "cpu":
		f, err := os.Create(o.output)
		if err != nil {
			return fmt.Errorf("--profile-output: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return fmt.Errorf("cpu profile: %w", err)
		}
		o.stop = func() error {
			pprof.StopCPUProfile()
			return f.Close()
		}
		return nil
	case "heap":
		runtime.MemProfileRate = 512 << 10
		o.stop = func() error {
			f, err := os.Create(o.output)
			if err != nil {
				return fmt.Errorf("--profile-output: %w", err)
			}
			if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
				f.Close()
				return fmt.Errorf("heap profile: %w", err)
			}
			return f.Close()
		}
		return nil
	default:
		return badinput.Errorf("--profile %q: want none, cpu or heap", o.name)
	}
}

func (o *profileOptions) finish() error {
	if o.stop == nil {
		return nil
	}
	stop := o.stop
	o.stop = nil
	return stop()
}

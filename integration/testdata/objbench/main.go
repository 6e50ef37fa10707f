// Command objbench runs, for BenchmarkObjectsAtScale, what ferry does with a backup's objects
// that its commands do not run alone: the carry-back's comparison of green's backup with the
// run's backup (compare), and a restore with a CPU profile (restore). It prints JSON.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/snapshot/resources"
	"github.com/ferrykube/ferry/storage"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
)

type mapping map[string]string

func (m mapping) String() string { return fmt.Sprint(map[string]string(m)) }
func (m mapping) Set(v string) error {
	from, to, ok := strings.Cut(v, "=")
	if !ok {
		return fmt.Errorf("%q: want from=to", v)
	}
	m[from] = to
	return nil
}

func main() {
	mode := flag.String("mode", "compare", "compare or restore")
	store := flag.String("storage", "", "storage URL")
	original := flag.String("original", "", "the run's backup")
	carried := flag.String("carried", "", "green's backup (compare)")
	kubeContext := flag.String("context", "", "kubeconfig context of the target (restore)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile here")
	parallel := flag.Int("parallel", 8, "as ferry's --parallel")
	m := mapping{}
	flag.Var(m, "map", "namespace mapping from=to (repeatable)")
	flag.Parse()
	if err := run(context.Background(), *mode, *store, *original, *carried, *kubeContext, *cpuProfile, *parallel, m); err != nil {
		fmt.Fprintln(os.Stderr, "objbench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, mode, url, original, carried, kubeContext, cpuProfile string, parallel int, m mapping) error {
	st, err := storage.Open(ctx, url)
	if err != nil {
		return err
	}
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	start := time.Now()
	out := map[string]any{}
	switch mode {
	case "compare":
		before, err := read(ctx, st, original)
		if err != nil {
			return err
		}
		defer before.Close()
		after, err := read(ctx, st, carried)
		if err != nil {
			return err
		}
		defer after.Close()
		cb, err := resources.PlanCarryBack(before, after, snapshot.Mapping{Namespaces: m}, time.Time{}, plans.Config{}, nil)
		if err != nil {
			return err
		}
		defer cb.Close()
		out["objects"], out["created"], out["changed"], out["deleted"] = after.Count, len(cb.Created), len(cb.Changed), len(cb.Deleted)
	case "restore":
		r, err := snapshot.Open(ctx, st, original, nil)
		if err != nil {
			return err
		}
		cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(),
			&clientcmd.ConfigOverrides{CurrentContext: kubeContext}).ClientConfig()
		if err != nil {
			return err
		}
		cfg.QPS, cfg.Burst = -1, 0 // as ferry's clients
		dyn, err := dynamic.NewForConfig(cfg)
		if err != nil {
			return err
		}
		var report snapshot.Report
		c := resources.Objects{Dynamic: dyn, Plan: r.Manifest.Plan, Concurrency: 4 * parallel, Mapping: snapshot.Mapping{Namespaces: m}}
		if err := c.Restore(ctx, r, &report); err != nil {
			return err
		}
		out["counts"] = report.Counts["objects"]
	default:
		return fmt.Errorf("mode %q: want compare or restore", mode)
	}
	out["seconds"] = time.Since(start).Seconds()
	return json.NewEncoder(os.Stdout).Encode(out)
}

func read(ctx context.Context, st storage.Backend, name string) (*resources.Archive, error) {
	r, err := snapshot.Open(ctx, st, name, nil)
	if err != nil {
		return nil, err
	}
	return resources.ReadArchive(ctx, r)
}

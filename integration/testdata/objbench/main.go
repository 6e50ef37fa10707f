// Command objbench runs, for BenchmarkObjectsAtScale, what ferry does with a backup's objects
// that its commands do not run alone: the carry-back's comparison of green's backup with the
// run's backup (compare), and a restore with a CPU profile (restore). To measure ferry's own
// memory at sizes the machine's API server is slow for, seed writes a backup of -objects
// ConfigMaps and Secrets (a fake cluster's), and restore with -null-api restores into a local
// HTTP endpoint that accepts every create. It prints JSON.
package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/plans/config"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/snapshot/resources"
	"github.com/ferrykube/ferry/storage"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	dynfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/rest"
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
	mode := flag.String("mode", "compare", "seed, compare or restore")
	objects := flag.Int("objects", 100000, "objects to seed")
	nullAPI := flag.Bool("null-api", false, "restore into a local endpoint that accepts every create")
	store := flag.String("storage", "", "storage URL")
	original := flag.String("original", "", "the run's backup")
	carried := flag.String("carried", "", "green's backup (compare)")
	kubeContext := flag.String("context", "", "kubeconfig context of the target (restore)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile here")
	parallel := flag.Int("parallel", 8, "as ferry's --parallel")
	m := mapping{}
	flag.Var(m, "map", "namespace mapping from=to (repeatable)")
	flag.Parse()
	if *mode == "seed" {
		if err := seed(context.Background(), *store, *original, *objects); err != nil {
			fmt.Fprintln(os.Stderr, "objbench:", err)
			os.Exit(1)
		}
		return
	}
	if *nullAPI {
		srv := httptest.NewServer(http.HandlerFunc(accept))
		defer srv.Close()
		os.Setenv("OBJBENCH_SERVER", srv.URL)
	}
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
		cb, err := resources.PlanCarryBack(ctx, before, after, snapshot.Mapping{Namespaces: m}, time.Time{}, config.Planning{}, nil, nil)
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
		cfg := &rest.Config{Host: os.Getenv("OBJBENCH_SERVER")}
		if cfg.Host == "" {
			if cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(),
				&clientcmd.ConfigOverrides{CurrentContext: kubeContext}).ClientConfig(); err != nil {
				return err
			}
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

// accept answers a create with the object sent, as the API server stores it.
func accept(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		http.NotFound(w, req)
		return
	}
	var obj map[string]any
	if err := json.NewDecoder(req.Body).Decode(&obj); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if meta, ok := obj["metadata"].(map[string]any); ok {
		meta["uid"] = fmt.Sprintf("%x", time.Now().UnixNano())
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	json.NewEncoder(w).Encode(obj)
}

// seed writes a backup of n objects as BenchmarkObjectsAtScale seeds them: three ConfigMaps to a
// Secret of about 0.5 KiB, 1,000 to a namespace.
func seed(ctx context.Context, url, name string, n int) error {
	st, err := storage.Open(ctx, url)
	if err != nil {
		return err
	}
	payload := strings.Repeat("x", 512)
	var objs []runtime.Object
	for i := range n {
		meta := map[string]any{"name": fmt.Sprintf("obj-%04d", i%1000), "namespace": fmt.Sprintf("seed-%03d", i/1000)}
		if i%4 == 3 {
			objs = append(objs, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": meta, "type": "Opaque", "data": map[string]any{"payload": base64.StdEncoding.EncodeToString([]byte(payload))}}})
		} else {
			objs = append(objs, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": map[string]any{"payload": payload}}})
		}
	}
	plan := &plans.Plan{Resources: []plans.Resource{
		{Version: "v1", Resource: "configmaps", Kind: "ConfigMap", Namespaced: true},
		{Version: "v1", Resource: "secrets", Kind: "Secret", Namespaced: true},
	}}
	cluster := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		{Version: "v1", Resource: "secrets"}: "SecretList", {Version: "v1", Resource: "configmaps"}: "ConfigMapList",
	}, objs...)
	w, err := snapshot.Create(ctx, st, name, plans.Cluster{}, plan, time.Now(), nil)
	if err != nil {
		return err
	}
	if err := (resources.Objects{Dynamic: cluster, Plan: plan}).Capture(ctx, w); err != nil {
		return err
	}
	_, err = w.Commit(ctx, time.Now())
	return err
}

// Package testbed runs what ferry's integration tests and demo need on one machine, bound to
// 127.0.0.1 only: two real Kubernetes control planes (blue and green, nodes and pods simulated by
// kwok, exec and port-forward mapped to local processes), MinIO servers and MariaDB servers.
//
// kwok v0.8.0 never closes a local command's stdin when the exec stream's stdin ends, so in the
// testbed a command that reads stdin to its end never returns. What ferry sends through exec stdin
// must therefore end by itself (a tar archive's end marker, a client's quit command), which is also
// sturdier on real clusters.
//
// The binaries are built from the Go module proxy into a cache outside the repository on first use
// (see EnsureBinaries). A testbed ends only what it started.
package testbed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Options says what to start.
type Options struct {
	// Clusters to create, e.g. "blue", "green".
	Clusters []string
	// NodesPerCluster is how many kwok nodes each cluster gets (default 2).
	NodesPerCluster int
	// MinIOs to start, e.g. "backup" (ferry's storage), "blue" and "green" (the clusters' own MinIO).
	MinIOs []string
	// MariaDBs to start, e.g. "blue" and "green" (the clusters' control-plane databases).
	MariaDBs []string
	// PostgreSQLs to start, e.g. "blue" and "green".
	PostgreSQLs []string
	// SeaweedFSs to start: S3 stores of another make than MinIO, e.g. "green" (a newer release's).
	SeaweedFSs []string
	// Provisioned clusters get a dynamic provisioner for the storage classes of Provisioner:
	// their claims bind to new folders under the data folder, as on a real cluster.
	Provisioned []string
	// Dir holds all state; empty means a new temporary folder, removed by Stop.
	Dir string
	// Persistent testbeds (make testbed-up) outlive the process that started them.
	Persistent bool
	// Log receives progress lines; nil means os.Stderr.
	Log io.Writer
}

// Everything is the full testbed the demo and end-to-end tests use.
var Everything = Options{
	Clusters:    []string{"blue", "green"},
	MinIOs:      []string{"backup", "blue", "green"},
	MariaDBs:    []string{"blue", "green"},
	PostgreSQLs: []string{"blue", "green"},
	SeaweedFSs:  []string{"green"},
	// Only green: blue's tests bind their claims to folders they fill (BindClaim).
	Provisioned: []string{"green"},
}

// Demo is Everything but what only tests need: SeaweedFS, whose cold build takes ten minutes.
var Demo = func() Options {
	o := Everything
	o.SeaweedFSs = nil
	return o
}()

// Testbed is a running testbed.
type Testbed struct {
	Dir string `json:"dir"`
	// Owner is the PID of the process whose end makes this testbed stale (0 when persistent).
	Owner    int                    `json:"owner"`
	Clusters map[string]*Cluster    `json:"clusters"`
	MinIO    map[string]*MinIO      `json:"minio"`
	MariaDB  map[string]*MariaDB    `json:"mariadb"`
	Postgres map[string]*PostgreSQL `json:"postgres"`
	// SeaweedFS holds the SeaweedFS servers (Options.SeaweedFSs).
	SeaweedFS map[string]*SeaweedFS `json:"seaweedfs,omitempty"`
	// HAProxy holds the HAProxies tests started with StartHAProxy.
	HAProxy map[string]*HAProxy `json:"haproxy,omitempty"`
	// Kubeconfig holds every cluster, each as a context of its own name.
	Kubeconfig string   `json:"kubeconfig"`
	Bins       Binaries `json:"binaries"`
	// ExecBin is on the PATH of commands that exec into simulated pods: put the ferry binary here
	// for mover pods (see InstallExecutable).
	ExecBin string `json:"execBin"`

	stopWatchers context.CancelFunc
	haproxyMu    sync.Mutex
	clock        *testClock
}

const stateFile = "testbed.json"

// Start brings up what opts asks for, in parallel. On failure it ends what it had started.
func Start(ctx context.Context, opts Options) (*Testbed, error) {
	log := opts.Log
	if log == nil {
		log = os.Stderr
	}
	if opts.NodesPerCluster == 0 {
		opts.NodesPerCluster = 2
	}
	reapStale(ctx, log)
	bins, err := EnsureBinaries(ctx, opts, log)
	if err != nil {
		return nil, err
	}
	tb := &Testbed{Dir: opts.Dir, Bins: bins, Clusters: map[string]*Cluster{}, MinIO: map[string]*MinIO{}, MariaDB: map[string]*MariaDB{}, Postgres: map[string]*PostgreSQL{},
		SeaweedFS: map[string]*SeaweedFS{}}
	if tb.Dir == "" {
		if tb.Dir, err = os.MkdirTemp("", "ferry-testbed-"); err != nil {
			return nil, err
		}
	} else if err := os.MkdirAll(tb.Dir, 0o755); err != nil {
		return nil, err
	}
	if !opts.Persistent {
		tb.Owner = os.Getpid()
	}
	tb.ExecBin = filepath.Join(tb.Dir, "bin")
	if err := os.MkdirAll(tb.ExecBin, 0o755); err != nil {
		return nil, err
	}
	start := time.Now()
	fmt.Fprintf(log, "testbed: starting %s in %s\n", describe(opts), tb.Dir)

	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	for _, name := range opts.Clusters {
		g.Go(func() error {
			c, err := createCluster(gctx, bins, tb.Dir, name, opts.NodesPerCluster, tb.ExecBin)
			if c != nil {
				mu.Lock()
				tb.Clusters[name] = c
				mu.Unlock()
			}
			return err
		})
	}
	for _, name := range opts.MinIOs {
		g.Go(func() error {
			m, err := startMinIO(gctx, bins, tb.Dir, name, false)
			if m != nil {
				mu.Lock()
				tb.MinIO[name] = m
				mu.Unlock()
			}
			return err
		})
	}
	for _, name := range opts.MariaDBs {
		g.Go(func() error {
			d, err := startMariaDB(gctx, bins, tb.Dir, name)
			if d != nil {
				mu.Lock()
				tb.MariaDB[name] = d
				mu.Unlock()
			}
			return err
		})
	}
	for _, name := range opts.PostgreSQLs {
		g.Go(func() error {
			p, err := startPostgres(gctx, bins, tb.Dir, name)
			if p != nil {
				mu.Lock()
				tb.Postgres[name] = p
				mu.Unlock()
			}
			return err
		})
	}
	for _, name := range opts.SeaweedFSs {
		g.Go(func() error {
			w, err := startSeaweedFS(gctx, bins, tb.Dir, name)
			if w != nil {
				mu.Lock()
				tb.SeaweedFS[name] = w
				mu.Unlock()
			}
			return err
		})
	}
	err = g.Wait()
	if err == nil {
		err = tb.writeKubeconfig()
	}
	if err == nil {
		err = tb.save()
	}
	if err != nil {
		tb.Stop(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("start testbed: %w", err)
	}
	var watchCtx context.Context
	watchCtx, tb.stopWatchers = context.WithCancel(context.Background())
	for _, c := range tb.Clusters {
		if err := c.mapMovers(watchCtx); err != nil {
			tb.Stop(context.WithoutCancel(ctx))
			return nil, err
		}
	}
	for _, name := range opts.Provisioned {
		c := tb.Clusters[name]
		if c == nil {
			continue
		}
		if err := c.provision(watchCtx, filepath.Join(tb.Dir, "data", "provisioned-"+name)); err != nil {
			tb.Stop(context.WithoutCancel(ctx))
			return nil, err
		}
	}
	fmt.Fprintf(log, "testbed: up in %s\n", time.Since(start).Round(100*time.Millisecond))
	return tb, nil
}

func describe(opts Options) string {
	var parts []string
	if len(opts.Clusters) > 0 {
		parts = append(parts, "clusters "+strings.Join(opts.Clusters, ", "))
	}
	if len(opts.MinIOs) > 0 {
		parts = append(parts, "MinIO "+strings.Join(opts.MinIOs, ", "))
	}
	if len(opts.MariaDBs) > 0 {
		parts = append(parts, "MariaDB "+strings.Join(opts.MariaDBs, ", "))
	}
	if len(opts.PostgreSQLs) > 0 {
		parts = append(parts, "PostgreSQL "+strings.Join(opts.PostgreSQLs, ", "))
	}
	if len(opts.SeaweedFSs) > 0 {
		parts = append(parts, "SeaweedFS "+strings.Join(opts.SeaweedFSs, ", "))
	}
	return strings.Join(parts, "; ")
}

// writeKubeconfig merges the clusters' kubeconfigs into one with a context per cluster.
func (tb *Testbed) writeKubeconfig() error {
	if len(tb.Clusters) == 0 {
		return nil
	}
	merged := clientcmdapi.NewConfig()
	for name, c := range tb.Clusters {
		cfg, err := clientcmd.LoadFromFile(c.Kubeconfig)
		if err != nil {
			return err
		}
		merged.Clusters[name] = cfg.Clusters[name]
		merged.AuthInfos[name] = cfg.AuthInfos[name]
		merged.Contexts[name] = cfg.Contexts[name]
	}
	if _, ok := merged.Contexts["blue"]; ok {
		merged.CurrentContext = "blue"
	}
	tb.Kubeconfig = filepath.Join(tb.Dir, "kubeconfig")
	return clientcmd.WriteToFile(*merged, tb.Kubeconfig)
}

func (tb *Testbed) save() error {
	data, err := json.MarshalIndent(tb, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(tb.Dir, stateFile), data, 0o644)
}

// Load reads the state of a testbed started in dir (by make testbed-up).
func Load(dir string) (*Testbed, error) {
	data, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return nil, fmt.Errorf("no testbed in %s: %w", dir, err)
	}
	tb := &Testbed{}
	if err := json.Unmarshal(data, tb); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, stateFile), err)
	}
	for _, c := range tb.Clusters {
		c.bins = tb.Bins
	}
	return tb, nil
}

// Stop deletes the clusters, ends the servers this testbed started and removes their files.
func (tb *Testbed) Stop(ctx context.Context) error {
	if tb.stopWatchers != nil {
		tb.stopWatchers()
	}
	var errs []error
	for _, c := range tb.Clusters {
		if err := c.delete(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	for _, m := range tb.MinIO {
		if err := m.Process.stop(10 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	for _, d := range tb.MariaDB {
		if err := d.Process.stop(30 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	for _, p := range tb.Postgres {
		if err := p.Process.stop(30 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	for _, w := range tb.SeaweedFS {
		if err := w.Process.stop(10 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	tb.haproxyMu.Lock()
	for _, h := range tb.HAProxy {
		if err := h.Process.stop(10 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	tb.haproxyMu.Unlock()
	killUnder(tb.Dir)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("stop testbed in %s: %w", tb.Dir, err)
	}
	return tb.removeFiles()
}

// removeFiles deletes what the testbed wrote into its folder, and the folder when that leaves it
// empty; nothing else, in case a person pointed it at a folder of their own.
func (tb *Testbed) removeFiles() error {
	var errs []error
	for _, pattern := range []string{"kwok-*", "minio-*", "mariadb-*", "postgres-*", "haproxy-*", "*.kubeconfig", "kubeconfig", "bin", "data", stateFile} {
		matches, _ := filepath.Glob(filepath.Join(tb.Dir, pattern))
		for _, m := range matches {
			if err := os.RemoveAll(m); err != nil {
				errs = append(errs, err)
			}
		}
	}
	os.Remove(tb.Dir) // only if empty
	return errors.Join(errs...)
}

// reapStale stops temporary testbeds whose owning process has died (a test binary killed by a
// timeout or a signal), so that their servers do not pile up.
func reapStale(ctx context.Context, log io.Writer) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "ferry-testbed-*"))
	for _, dir := range dirs {
		tb, err := Load(dir)
		if err != nil || tb.Owner == 0 || !(&Process{PID: tb.Owner}).exited() {
			continue
		}
		fmt.Fprintf(log, "testbed: stopping a stale testbed in %s (its test process %d is gone)\n", dir, tb.Owner)
		if err := tb.Stop(ctx); err != nil {
			fmt.Fprintf(log, "testbed: %v\n", err)
		}
	}
}

// Running reports whether every server of the testbed still runs.
func (tb *Testbed) Running() bool {
	for _, m := range tb.MinIO {
		if !m.Process.ours() {
			return false
		}
	}
	for _, d := range tb.MariaDB {
		if !d.Process.ours() {
			return false
		}
	}
	for _, p := range tb.Postgres {
		if !p.Process.ours() {
			return false
		}
	}
	for _, c := range tb.Clusters {
		kc, _, err := c.Clients()
		if err != nil {
			return false
		}
		if _, err := kc.Discovery().ServerVersion(); err != nil {
			return false
		}
	}
	return true
}

// InstallExecutable copies a program into ExecBin, where exec into simulated pods finds it.
func (tb *Testbed) InstallExecutable(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	dst := filepath.Join(tb.ExecBin, filepath.Base(path))
	tmp := dst + ".new"
	if err := os.WriteFile(tmp, data, 0o755); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

// DataDir returns a new folder that lives as long as the testbed, for volume contents and exec
// working directories that later tests of the package still reach.
func (tb *Testbed) DataDir(name string) (string, error) {
	if err := os.MkdirAll(filepath.Join(tb.Dir, "data"), 0o755); err != nil {
		return "", err
	}
	return os.MkdirTemp(filepath.Join(tb.Dir, "data"), name+"-")
}

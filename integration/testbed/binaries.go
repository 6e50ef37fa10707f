package testbed

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// component is a set of binaries built from one tools module under tools/.
type component struct {
	module  string // folder under tools/
	version string // pinned version; part of the cache path
	tools   map[string]string
	ldflags string
}

// recipe is part of the cache path; raise it when the way binaries are built changes.
const recipe = "r2"

// k8sVersionFlags stamp the version the release scripts would, so servers report v1.37.2.
const k8sVersionFlags = "-X k8s.io/component-base/version.gitVersion=v1.37.2 -X k8s.io/component-base/version.gitMajor=1 " +
	"-X k8s.io/component-base/version.gitMinor=37 -X k8s.io/component-base/version.gitTreeState=clean " +
	"-X k8s.io/client-go/pkg/version.gitVersion=v1.37.2 -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=37"

var components = []component{
	{"etcd", "v3.6.16", map[string]string{"etcd": "go.etcd.io/etcd/server/v3"}, ""},
	{"kwok", "v0.8.0", map[string]string{"kwok": "sigs.k8s.io/kwok/cmd/kwok", "kwokctl": "sigs.k8s.io/kwok/cmd/kwokctl"}, ""},
	{"minio", "v0.0.0-20260212201848-7aac2a2c5b7c", map[string]string{"minio": "github.com/minio/minio"}, ""},
	{"seaweedfs", "v0.0.0-20261109003541-7506e5f91cd6", map[string]string{"weed": "github.com/seaweedfs/seaweedfs/weed"}, ""},
	{"kubernetes", "v1.37.2", map[string]string{
		"kube-apiserver":          "k8s.io/kubernetes/cmd/kube-apiserver",
		"kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
		"kube-scheduler":          "k8s.io/kubernetes/cmd/kube-scheduler",
		"kubectl":                 "k8s.io/kubernetes/cmd/kubectl",
	}, k8sVersionFlags},
}

// Binaries maps a binary's name (kube-apiserver, etcd, kwokctl, minio, ...) to its path.
type Binaries map[string]string

// CacheDir is where built binaries are kept, outside any checkout: $FERRY_TESTBED_CACHE, else the
// user's cache folder.
func CacheDir() (string, error) {
	if d := os.Getenv("FERRY_TESTBED_CACHE"); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("find a cache folder (set FERRY_TESTBED_CACHE): %w", err)
	}
	return filepath.Join(d, "ferry", "testbed"), nil
}

func toolsDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "tools")
}

// EnsureBinaries builds the testbed binaries opts needs that are not in the cache yet, from the Go
// module proxy, printing progress to out, and installs MariaDB from Debian's packages when opts
// needs it and it is missing. A file lock keeps concurrent test packages from building the same
// thing twice.
func EnsureBinaries(ctx context.Context, opts Options, out io.Writer) (Binaries, error) {
	cache, err := CacheDir()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return nil, err
	}
	unlock, err := lockFile(filepath.Join(cache, ".lock"))
	if err != nil {
		return nil, err
	}
	defer unlock()

	needed := map[string]bool{"minio": len(opts.MinIOs) > 0, "seaweedfs": len(opts.SeaweedFSs) > 0}
	for _, module := range []string{"kubernetes", "etcd", "kwok"} {
		needed[module] = len(opts.Clusters) > 0
	}
	bins := Binaries{}
	for _, c := range components {
		if !needed[c.module] {
			continue
		}
		dir := filepath.Join(cache, c.module+"-"+c.version+"-"+recipe)
		for name, pkg := range c.tools {
			path := filepath.Join(dir, name)
			bins[name] = path
			if _, err := os.Stat(path); err == nil {
				continue
			}
			if err := build(ctx, out, c, name, pkg, path); err != nil {
				return nil, err
			}
		}
	}
	if len(opts.MariaDBs) > 0 {
		if err := ensurePackages(ctx, out, []string{"mariadb-server", "mariadb-client"}, func() bool {
			_, err1 := lookPath("mariadbd")
			_, err2 := lookPath("mariadb-dump")
			return err1 == nil && err2 == nil
		}); err != nil {
			return nil, err
		}
		for _, name := range []string{"mariadbd", "mariadb-install-db", "mariadb", "mariadb-dump"} {
			if bins[name], err = lookPath(name); err != nil {
				return nil, err
			}
		}
	}
	if len(opts.PostgreSQLs) > 0 {
		if err := ensurePackages(ctx, out, []string{"postgresql", "postgresql-client"}, func() bool {
			_, err1 := postgresBin("initdb")
			_, err2 := lookPath("pg_dump")
			return err1 == nil && err2 == nil
		}); err != nil {
			return nil, err
		}
		for _, name := range []string{"initdb", "postgres"} {
			if bins[name], err = postgresBin(name); err != nil {
				return nil, err
			}
		}
		for _, name := range []string{"psql", "pg_dump"} {
			if bins[name], err = lookPath(name); err != nil {
				return nil, err
			}
		}
	}
	return bins, nil
}

func build(ctx context.Context, out io.Writer, c component, name, pkg, path string) error {
	fmt.Fprintf(out, "testbed: building %s (%s %s) into %s; a cold build takes minutes\n", name, c.module, c.version, filepath.Dir(path))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".building"
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", c.ldflags, "-o", tmp, pkg)
	cmd.Dir = filepath.Join(toolsDir(), c.module)
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=readonly")
	cmd.Stdout, cmd.Stderr = out, out
	start := time.Now()
	done := make(chan struct{})
	go func() {
		tick := time.NewTicker(30 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				fmt.Fprintf(out, "testbed: still building %s (%s so far)\n", name, time.Since(start).Round(time.Second))
			}
		}
	}()
	err := cmd.Run()
	close(done)
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("build %s from %s: %w", name, cmd.Dir, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	fmt.Fprintf(out, "testbed: built %s in %s\n", name, time.Since(start).Round(time.Second))
	return nil
}

// lookPath finds a program on PATH or in the sbin folders Debian installs servers into.
func lookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/usr/local/sbin", "/sbin"} {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found on PATH or in /usr/sbin", name)
}

// haproxyBin installs Debian's haproxy when it is missing and returns its path; unlike the other
// servers, tests start HAProxy on demand (StartHAProxy).
func haproxyBin(ctx context.Context, out io.Writer) (string, error) {
	if err := ensurePackages(ctx, out, []string{"haproxy"}, func() bool {
		_, err := lookPath("haproxy")
		return err == nil
	}); err != nil {
		return "", err
	}
	return lookPath("haproxy")
}

// ensurePackages installs Debian packages with apt-get unless present says they are there.
func ensurePackages(ctx context.Context, out io.Writer, packages []string, present func() bool) error {
	if present() {
		return nil
	}
	fmt.Fprintf(out, "testbed: installing Debian's %s\n", strings.Join(packages, " and "))
	var prefix []string
	if os.Geteuid() != 0 {
		prefix = []string{"sudo", "-n"}
	}
	run := func(args ...string) error {
		cmd := exec.CommandContext(ctx, args[0], args[1:]...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		cmd.Stdout, cmd.Stderr = out, out
		return cmd.Run()
	}
	install := append(append(prefix, "apt-get", "install", "-y", "--no-install-recommends"), packages...)
	if err := run(install...); err != nil {
		if err := run(append(prefix, "apt-get", "update")...); err != nil {
			return fmt.Errorf("apt-get update: %w", err)
		}
		if err := run(install...); err != nil {
			return fmt.Errorf("install %s (as root, or with passwordless sudo): %w", strings.Join(packages, " "), err)
		}
	}
	return nil
}

func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}

// versionsLine says which pinned versions the testbed runs, for logs.
func versionsLine() string {
	var parts []string
	for _, c := range components {
		parts = append(parts, c.module+" "+c.version)
	}
	return strings.Join(parts, ", ")
}

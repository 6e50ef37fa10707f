// Command testbed builds, starts and stops ferry's local testbed for people (make testbed-up,
// make testbed-down, make demo, make demo-upgrade); Go tests start their own through the testbed package.
//
//	testbed build [-demo]         build or find every binary (-demo: those the demos need), printing progress
//	testbed up [-dir D]           start blue, green, three MinIO and two MariaDB; print how to reach them
//	testbed down [-dir D]         stop what up started
//	testbed info [-dir D]         print how to reach the running testbed
//	testbed apply -cluster C F... server-side apply manifests to a cluster of the running testbed
//	testbed kubectl ARGS...       run the testbed's kubectl with its kubeconfig (contexts blue, green)
//	testbed demo -ferry F [-fixtures D] [-dir D]
//	                              a fresh testbed, the platform and its data on blue, ferry migrate to
//	                              green behind HAProxy with a client counting answers (demo.go)
//	testbed demo-upgrade -ferry F [-dir D]
//	                              a fresh testbed, the sample platform's release 1 and its data on blue,
//	                              release 2 on green, ferry migrate --upgrade (demo_upgrade.go)
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/ferrykube/ferry/integration/testbed"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "testbed: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: testbed build|up|down|info|apply|kubectl|demo|demo-upgrade [flags]")
	}
	switch args[0] {
	case "kubectl":
		return kubectl(ctx, filepath.Join(os.TempDir(), "ferry-testbed"), args[1:])
	case "demo":
		return demo(ctx, args[1:])
	case "demo-upgrade":
		return demoUpgrade(ctx, args[1:])
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	dir := fs.String("dir", filepath.Join(os.TempDir(), "ferry-testbed"), "folder holding the testbed's state")
	cluster := fs.String("cluster", "blue", "cluster to apply to")
	demoOnly := fs.Bool("demo", false, "build: only what the demos need")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	switch args[0] {
	case "build":
		opts := testbed.Everything
		if *demoOnly {
			opts = testbed.Demo
		}
		_, err := testbed.EnsureBinaries(ctx, opts, os.Stderr)
		return err
	case "up":
		return up(ctx, *dir)
	case "down":
		tb, err := testbed.Load(*dir)
		if err != nil {
			fmt.Fprintf(os.Stderr, "testbed: nothing to stop in %s\n", *dir)
			return nil
		}
		if err := tb.Stop(ctx); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "testbed: stopped the testbed in %s\n", *dir)
		return nil
	case "info":
		tb, err := testbed.Load(*dir)
		if err != nil {
			return fmt.Errorf("%w (start it with make testbed-up)", err)
		}
		printAccess(tb)
		return nil
	case "apply":
		return apply(ctx, *dir, *cluster, fs.Args())
	}
	return fmt.Errorf("unknown command %q: want build, up, down, info, apply, kubectl, demo or demo-upgrade", args[0])
}

func up(ctx context.Context, dir string) error {
	tb, err := testbed.Load(dir)
	if err == nil && tb.Running() {
		fmt.Fprintf(os.Stderr, "testbed: already running in %s\n", dir)
	} else {
		if err == nil {
			tb.Stop(ctx) // a stale one, e.g. after a reboot
		}
		opts := testbed.Everything
		opts.Dir, opts.Persistent = dir, true
		if tb, err = testbed.Start(ctx, opts); err != nil {
			return err
		}
		if err := tb.MinIO["backup"].CreateBucket(ctx, "ferry"); err != nil {
			return err
		}
	}
	printAccess(tb)
	return nil
}

func printAccess(tb *testbed.Testbed) {
	var clusters []string
	for name := range tb.Clusters {
		clusters = append(clusters, name)
	}
	sort.Strings(clusters)
	fmt.Printf("\nThe testbed runs in %s.\n\n", tb.Dir)
	fmt.Printf("Kubeconfig with contexts %s:\n  export KUBECONFIG=%s\n", strings.Join(clusters, " and "), tb.Kubeconfig)
	for _, name := range clusters {
		fmt.Printf("  %-6s %s (API server %s)\n", name, tb.Clusters[name].Kubeconfig, tb.Clusters[name].Server)
	}
	fmt.Printf("\nkubectl (if you have none): %s\n", tb.Bins["kubectl"])
	fmt.Printf("  kubectl --context blue get nodes,pods -A\n")
	fmt.Printf("  ferry --context blue version        # ferry takes the same kubeconfig flags\n\n")
	for _, name := range []string{"backup", "blue", "green"} {
		if m := tb.MinIO[name]; m != nil {
			fmt.Printf("MinIO %-6s %s  (AWS_ACCESS_KEY_ID=%s AWS_SECRET_ACCESS_KEY=%s)\n", name, m.Endpoint, m.AccessKey, m.SecretKey)
		}
	}
	if m := tb.MinIO["backup"]; m != nil {
		fmt.Printf("  ferry storage on it: --storage 's3://ferry/demo?endpoint=%s&path-style=true'\n", m.Endpoint)
	}
	for _, name := range []string{"blue", "green"} {
		if d := tb.MariaDB[name]; d != nil {
			fmt.Printf("MariaDB %-6s 127.0.0.1:%d  (user %s, password %s)\n", name, d.Port, d.User, d.Password)
		}
	}
	for _, name := range []string{"blue", "green"} {
		if p := tb.Postgres[name]; p != nil {
			fmt.Printf("PostgreSQL %-6s 127.0.0.1:%d  (user %s, password %s)\n", name, p.Port, p.User, p.Password)
		}
	}
	fmt.Printf("\nStop everything with: make testbed-down\n")
}

func apply(ctx context.Context, dir, cluster string, files []string) error {
	tb, err := testbed.Load(dir)
	if err != nil {
		return fmt.Errorf("%w (start it with make testbed-up)", err)
	}
	c := tb.Clusters[cluster]
	if c == nil {
		return fmt.Errorf("no cluster %q in the testbed", cluster)
	}
	for _, f := range files {
		fmt.Fprintf(os.Stderr, "testbed: applying %s to %s\n", f, cluster)
		if err := c.Apply(ctx, io.Discard, f); err != nil {
			return err
		}
	}
	return nil
}

func kubectl(ctx context.Context, dir string, args []string) error {
	tb, err := testbed.Load(dir)
	if err != nil {
		return fmt.Errorf("%w (start it with make testbed-up)", err)
	}
	cmd := exec.CommandContext(ctx, tb.Bins["kubectl"], args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+tb.Kubeconfig)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	return cmd.Run()
}

package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/ferrykube/ferry/integration/testbed"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// demo runs the blue-green migration end to end on a fresh persistent testbed: the platform and
// its data on blue, green readied, HAProxy in front of a blue and a green HTTP endpoint with a
// client counting answers all along, ferry migrate with progress and its report; then green takes
// writes, a plain rollback refuses to lose them, and rollback --carry-back brings them to blue
// (the client still counting); last, the client's counts and how to clean up.
func demo(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	dir := fs.String("dir", filepath.Join(os.TempDir(), "ferry-testbed"), "folder holding the testbed's state")
	ferry := fs.String("ferry", "bin/ferry", "the ferry binary to run")
	fixtures := fs.String("fixtures", "", "the Kubeflow fixture's folder; when it is missing, the sample platform of examples/platform")
	withZoo := fs.Bool("zoo", true, "apply the zoo (real-world shapes beyond the platform: StatefulSet databases, quotas, big rows, rollout history, node ports, odd files, long bucket keys) to blue too")
	if err := fs.Parse(args); err != nil {
		return err
	}
	tb, err := freshTestbed(ctx, *dir, *ferry)
	if err != nil {
		return err
	}
	blue, green := tb.Clusters["blue"], tb.Clusters["green"]

	files, workspace := platformFiles(*fixtures)
	stage("applying %s to blue", describeFiles(files))
	if err := blue.Apply(ctx, io.Discard, files...); err != nil {
		return err
	}
	stage("seeding blue's data: kfp MySQL (mlpipeline, cachedb), MinIO bucket %s, a user volume %s", testbed.PlatformBucket, workspace)
	seeded, err := tb.SeedPlatform(ctx, blue, tb.DataDir)
	if err != nil {
		return err
	}
	if err := seedWorkspace(ctx, tb, blue, workspace); err != nil {
		return err
	}
	for _, selector := range []string{"app=mysql", "app=minio"} {
		if err := runningPod(ctx, blue, "kubeflow", selector); err != nil {
			return err
		}
	}
	fmt.Printf("    blue: 502 database rows in 2 schemas, %d objects in bucket %s, files in %s\n", len(seeded.Objects), testbed.PlatformBucket, workspace)
	var zoo *testbed.Zoo
	if *withZoo {
		stage("applying the zoo to blue: StatefulSet databases, a quota'd Profile namespace, restricted Pod Security, big rows, rollout history, node ports and a chosen cluster IP, hand-written endpoints, a CI token, finished jobs, odd files, long bucket keys")
		if zoo, err = tb.ApplyZoo(ctx, blue, tb.DataDir, io.Discard); err != nil {
			return err
		}
		fmt.Printf("    blue: namespaces %s; %d claims; schema %s, database %s, bucket %s (%d keys)\n", strings.Join(zoo.Namespaces, ", "),
			len(zoo.Claims), testbed.ZooSchema, testbed.ZooPGDB, testbed.ZooBucket, len(zoo.BucketKeys))
	}

	stage("readying green: StorageClass standard (provisioned), its database and MinIO pods served by green's servers")
	if err := tb.ServePlatform(ctx, green, "green"); err != nil {
		return err
	}
	if zoo != nil {
		pgDir, err := tb.DataDir("zoo-green-postgres-exec")
		if err != nil {
			return err
		}
		if err := tb.ServeZoo(ctx, green, "green", pgDir); err != nil {
			return err
		}
	}

	stage("starting blue's and green's HTTP endpoints, HAProxy in front of them, and a client")
	blueAddr, stopBlue, err := colorEndpoint("blue")
	if err != nil {
		return err
	}
	defer stopBlue()
	greenAddr, stopGreen, err := colorEndpoint("green")
	if err != nil {
		return err
	}
	defer stopGreen()
	h, err := tb.StartHAProxy(ctx, "demo", blueAddr, greenAddr)
	if err != nil {
		return err
	}
	fmt.Printf("    HAProxy %s: blue %s at weight 256, green %s at 0 (runtime API %s)\n", h.URL, blueAddr, greenAddr, h.Socket)
	client := startClient(h.URL)

	work := filepath.Join(tb.Dir, "data")
	storage := "file://" + filepath.Join(work, "backups")
	config := filepath.Join(work, "ferry.yaml")
	configText := h.MigrateConfig("http://"+greenAddr, 5*time.Second, time.Second, 1)
	if zoo != nil {
		configText += zoo.Config // the zoo's databases and bucket
	}
	configText += testbed.FerryConfig // kwok's own resources stay in each cluster
	if err := os.WriteFile(config, []byte(configText), 0o644); err != nil {
		return err
	}
	global := []string{"--kubeconfig", tb.Kubeconfig, "--storage", storage}
	migrateArgs := append(append([]string{}, global...), "--progress", "always", "migrate", "--from", "blue", "--to", "green", "-f", config, "--allow-skipped")
	stage("%s %s", *ferry, shellJoin(migrateArgs))
	fmt.Printf("    (ferry.yaml: preset kubeflow, classes gp3/nfs-client → standard, HAProxy steps 10/50/100 %% with a 5s soak, an HTTP gate on green, kwok's resources excluded)\n")
	if zoo != nil {
		fmt.Printf("    (and the zoo's databases zoo-mariadb and zoo-postgres, in StatefulSets, and its bucket %s)\n", testbed.ZooBucket)
	}
	// ferry prints the run's report on stdout when it ends: kept for a failure, where it says how
	// to go on; a finished run's report comes from ferry migrate status below.
	logFile := filepath.Join(work, "ferry-migrate.log")
	stdout, stderr, migrateErr := runShown(exec.CommandContext(ctx, *ferry, migrateArgs...), logFile)
	fmt.Printf("    (ferry's whole log, its INFO lines too: %s)\n", logFile)
	// A moment more of requests shows where traffic went.
	client.phase.Store(after)
	pause(ctx, 2*time.Second)

	m := regexp.MustCompile(`Run (run-[0-9]{8}-[0-9]{6}-[0-9a-f]{6})`).FindStringSubmatch(stderr)
	if m == nil {
		client.stop()
		fmt.Print(stdout)
		return fmt.Errorf("ferry migrate started no run: %v", migrateErr)
	}
	id := m[1]
	var errs []error
	// A run that went on without what its backup skipped (--allow-skipped: a database without a
	// running pod) ends with exit 3, never 0.
	var exit *exec.ExitError
	if lacks := regexp.MustCompile(`green lacks \d+ items its backup skipped`).FindString(stderr); lacks != "" && errors.As(migrateErr, &exit) && exit.ExitCode() == 3 {
		stage("ferry migrate ended with exit 3: %s, which its report lists", lacks)
		migrateErr = nil
	}
	if migrateErr != nil {
		stage("ferry migrate ended with %v; its report", migrateErr)
		fmt.Print(stdout)
		errs = append(errs, fmt.Errorf("ferry migrate: %w", migrateErr))
	} else {
		status := append(append([]string{}, global...), "migrate", "status", id)
		stage("the run's report: %s %s", *ferry, shellJoin(status))
		report := exec.CommandContext(ctx, *ferry, status...)
		report.Stdout, report.Stderr = os.Stdout, os.Stderr
		if err := report.Run(); err != nil {
			return fmt.Errorf("ferry migrate status %s: %w", id, err)
		}
		if err := rollBackCarryingWrites(ctx, tb, *ferry, global, id, workspace, client); err != nil {
			errs = append(errs, err)
		}
	}
	client.stop()

	stage("the client's requests through HAProxy (%s)", h.URL)
	counts, failed := client.result()
	for _, phase := range []string{during, after, carrying, backOnBlue} {
		if counts[phase] != nil {
			fmt.Printf("    %-30s served by blue: %6d   served by green: %6d\n", phase+":", counts[phase]["blue"], counts[phase]["green"])
		}
	}
	fmt.Printf("    failed requests: %d\n", len(failed))
	for i, f := range failed {
		if i == 5 {
			fmt.Printf("    ... and %d more\n", len(failed)-i)
			break
		}
		fmt.Printf("    failed: %s\n", f)
	}
	fmt.Printf("\nThe testbed and HAProxy stay up: %s %s migrate status %s shows the run again. Clean up: make testbed-down\n", *ferry, shellJoin(global), id)
	if len(failed) > 0 {
		errs = append(errs, fmt.Errorf("%d requests through HAProxy failed", len(failed)))
	}
	return errors.Join(errs...)
}

// The demo's writes on green after the cutover, which the carry-back brings to blue.
const (
	greenTable     = "mlpipeline.after_cutover"
	greenFile      = "written-on-green.md"
	greenObject    = "after-cutover/summary.json"
	greenConfigMap = "after-cutover"
)

// rollBackCarryingWrites has green take writes of every kind, shows that a plain rollback refuses
// to lose them, rolls back with --carry-back while the client goes on, and checks that blue holds
// what green wrote.
func rollBackCarryingWrites(ctx context.Context, tb *testbed.Testbed, ferry string, global []string, id, workspace string, client *client) error {
	ns, claim, _ := strings.Cut(workspace, "/")
	blue, green := tb.Clusters["blue"], tb.Clusters["green"]
	blueKC, _, err := blue.Clients()
	if err != nil {
		return err
	}
	greenKC, _, err := green.Clients()
	if err != nil {
		return err
	}
	stage("green takes writes after the cutover: 3 rows in %s, %s in %s, %s in bucket %s, ConfigMap kubeflow/%s",
		greenTable, greenFile, workspace, greenObject, testbed.PlatformBucket, greenConfigMap)
	if _, err := tb.MariaDB["green"].SQL(ctx, tb.Bins, "CREATE TABLE "+greenTable+" (id INT PRIMARY KEY, note VARCHAR(64)); "+
		"INSERT INTO "+greenTable+" VALUES (1, 'run 41'), (2, 'run 42'), (3, 'run 43');"); err != nil {
		return fmt.Errorf("write rows on green: %w", err)
	}
	greenDir, err := claimDir(ctx, greenKC, ns, claim)
	if err != nil {
		return fmt.Errorf("green's %w", err)
	}
	if err := os.WriteFile(filepath.Join(greenDir, greenFile), []byte("# experiment 13, run on green\n"), 0o644); err != nil {
		return err
	}
	if _, err := tb.MinIO["green"].S3Client().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(testbed.PlatformBucket), Key: aws.String(greenObject),
		Body: strings.NewReader(`{"runs": 43}`)}); err != nil {
		return fmt.Errorf("write an object on green: %w", err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: greenConfigMap}, Data: map[string]string{"written-on": "green"}}
	if _, err := greenKC.CoreV1().ConfigMaps("kubeflow").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		return err
	}

	rollback := append(append([]string{}, global...), "rollback", "--run", id)
	stage("%s %s   (no flag: ferry refuses, naming what would be lost)", ferry, shellJoin(rollback))
	var refusal strings.Builder
	cmd := exec.CommandContext(ctx, ferry, rollback...)
	cmd.Stderr = &quietInfo{out: &refusal}
	err = cmd.Run()
	fmt.Print(indent(refusal.String()))
	if code := exitCode(err); code != 4 {
		return fmt.Errorf("ferry rollback without a flag exited %d, want 4 (a refusal to lose data)", code)
	}

	carry := append(slices.Clone(rollback), "--carry-back")
	stage("%s %s", ferry, shellJoin(carry))
	client.phase.Store(carrying)
	started := time.Now()
	shown := &quietInfo{out: os.Stderr}
	cmd = exec.CommandContext(ctx, ferry, carry...)
	cmd.Stdout, cmd.Stderr = os.Stdout, shown
	err = cmd.Run()
	shown.flush()
	client.phase.Store(backOnBlue)
	if err != nil {
		return fmt.Errorf("ferry rollback --carry-back: %w", err)
	}
	fmt.Printf("    (the carry-back command took %s)\n", time.Since(started).Round(time.Millisecond))
	pause(ctx, 2*time.Second)

	stage("what green wrote, read on blue")
	var missing checklist
	check := missing.check
	rows, err := tb.MariaDB["blue"].SQL(ctx, tb.Bins, "SELECT COUNT(*) FROM "+greenTable)
	check("3 rows in "+greenTable, err == nil && strings.TrimSpace(rows) == "3")
	dir, err := claimDir(ctx, blueKC, ns, claim)
	if err == nil {
		_, err = os.Stat(filepath.Join(dir, greenFile))
	}
	check(greenFile+" in "+workspace, err == nil)
	_, err = tb.MinIO["blue"].S3Client().HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(testbed.PlatformBucket), Key: aws.String(greenObject)})
	check(greenObject+" in bucket "+testbed.PlatformBucket, err == nil)
	_, err = blueKC.CoreV1().ConfigMaps("kubeflow").Get(ctx, greenConfigMap, metav1.GetOptions{})
	check("ConfigMap kubeflow/"+greenConfigMap, err == nil)
	if len(missing) > 0 {
		return fmt.Errorf("blue lacks what green wrote: %s", strings.Join(missing, ", "))
	}
	return nil
}

// checklist collects what a demo looked for and did not find, printing each look: what, yes or NO.
type checklist []string

func (c *checklist) check(what string, ok bool) {
	fmt.Printf("    %-52s %s\n", what+":", map[bool]string{true: "yes", false: "NO"}[ok])
	if !ok {
		*c = append(*c, what)
	}
}

// freshTestbed stops a previous testbed in dir and starts a persistent one with everything
// (clusters blue and green, servers for both, the backup MinIO with bucket ferry), the ferry
// binary installed for mover pods.
func freshTestbed(ctx context.Context, dir, ferry string) (*testbed.Testbed, error) {
	if _, err := os.Stat(ferry); err != nil {
		return nil, fmt.Errorf("ferry binary: %w (make build writes bin/ferry)", err)
	}
	stage("stopping a previous testbed in %s, if any", dir)
	if old, err := testbed.Load(dir); err == nil {
		if err := old.Stop(ctx); err != nil {
			return nil, err
		}
	}
	stage("starting a fresh testbed (clusters blue and green, MinIO, MariaDB, PostgreSQL)")
	opts := testbed.Demo
	opts.Dir, opts.Persistent = dir, true
	tb, err := testbed.Start(ctx, opts)
	if err != nil {
		return nil, err
	}
	if err := tb.MinIO["backup"].CreateBucket(ctx, "ferry"); err != nil {
		return nil, err
	}
	// Mover pods exec `ferry` in the testbed.
	if err := tb.InstallExecutable(ferry); err != nil {
		return nil, fmt.Errorf("install %s for mover pods: %w", ferry, err)
	}
	return tb, nil
}

// runShown runs a ferry command with its stderr shown on ours but for its INFO log lines, and
// whole in the file log; it returns what the command wrote on stdout and stderr.
func runShown(cmd *exec.Cmd, log string) (stdout, stderr string, err error) {
	f, err := os.Create(log)
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	var out, errOut strings.Builder
	shown := &quietInfo{out: os.Stderr}
	cmd.Stdout, cmd.Stderr = &out, io.MultiWriter(shown, &errOut, f)
	err = cmd.Run()
	shown.flush()
	return out.String(), errOut.String(), err
}

// claimDir is the folder of the testbed's volume bound to a claim.
func claimDir(ctx context.Context, kc kubernetes.Interface, ns, claim string) (string, error) {
	pvc, err := kc.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	pv, err := kc.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("volume of %s/%s: %w", ns, claim, err)
	}
	if pv.Spec.HostPath == nil {
		return "", fmt.Errorf("volume of %s/%s: not a folder of the testbed", ns, claim)
	}
	return pv.Spec.HostPath.Path, nil
}

func exitCode(err error) int {
	var exitErr *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exitErr):
		return exitErr.ExitCode()
	}
	return -1
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return ""
	}
	return "    " + strings.ReplaceAll(s, "\n", "\n    ") + "\n"
}

func pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// quietInfo passes ferry's output on line by line but for its INFO log lines: the run's
// transitions, warnings and errors stay readable.
type quietInfo struct {
	out io.Writer
	buf []byte
}

func (q *quietInfo) Write(p []byte) (int, error) {
	q.buf = append(q.buf, p...)
	for {
		i := bytes.IndexByte(q.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		if line := q.buf[:i+1]; !bytes.Contains(line, []byte(" level=INFO ")) {
			q.out.Write(line)
		}
		q.buf = q.buf[i+1:]
	}
}

func (q *quietInfo) flush() {
	q.out.Write(q.buf)
	q.buf = nil
}

// shellJoin joins a command's arguments as a shell reads them back: an argument with characters
// a shell would take for its own (a storage URL's ? and &) in single quotes.
func shellJoin(args []string) string {
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = a
		if a == "" || strings.ContainsFunc(a, func(r rune) bool { return !strings.ContainsRune(shellSafe, r) }) {
			quoted[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(quoted, " ")
}

const shellSafe = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=,@%+"

func stage(format string, args ...any) {
	fmt.Printf("==> "+format+"\n", args...)
}

// platformFiles are the Kubeflow fixture's manifests when fixtures holds them, else the sample
// platform's, with the user's claim each has.
func platformFiles(fixtures string) (files []string, workspace string) {
	if fixtures != "" {
		if _, err := os.Stat(filepath.Join(fixtures, "platform.yaml")); err == nil {
			return []string{filepath.Join(fixtures, "crds.yaml"), filepath.Join(fixtures, "platform.yaml"), filepath.Join(fixtures, "profiles.yaml")},
				"kubeflow-user-example-com/test-workspace"
		}
	}
	sample := filepath.Join("examples", "platform")
	return []string{filepath.Join(sample, "00-crds.yaml"), filepath.Join(sample, "10-platform.yaml"), filepath.Join(sample, "20-profiles.yaml")},
		"alice/workspace-alice-nb"
}

func describeFiles(files []string) string {
	if strings.Contains(files[0], "examples") {
		return "the sample platform (" + filepath.Dir(files[0]) + ")"
	}
	return "the Kubeflow fixture (" + filepath.Dir(files[0]) + ")"
}

// seedWorkspace binds the user's claim (namespace/name) on c to a folder holding a few files.
func seedWorkspace(ctx context.Context, tb *testbed.Testbed, c *testbed.Cluster, workspace string) error {
	ns, claim, _ := strings.Cut(workspace, "/")
	dir, err := tb.DataDir(claim)
	if err != nil {
		return err
	}
	model := make([]byte, 1<<20)
	for i := range model {
		model[i] = byte(i * 7)
	}
	files := map[string][]byte{"notes.md": []byte("# experiment 12\nlr 0.001, 40 epochs\n"), "model/config.json": []byte(`{"lr": 0.001}`), "model/weights.bin": model}
	for name, data := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return err
		}
	}
	if err := c.BindClaim(ctx, ns, claim, dir); err != nil {
		return fmt.Errorf("bind %s on %s: %w", workspace, c.Name, err)
	}
	return nil
}

// runningPod waits until a pod matching selector runs.
func runningPod(ctx context.Context, c *testbed.Cluster, namespace, selector string) error {
	kc, _, err := c.Clients()
	if err != nil {
		return err
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		pods, err := kc.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, nil
		}
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("no running pod with %s in %s on %s: %w", selector, namespace, c.Name, err)
	}
	return nil
}

// colorEndpoint serves its color on a free port of 127.0.0.1 until stop.
func colorEndpoint(color string) (addr string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, color) }),
		ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	return ln.Addr().String(), func() { srv.Close() }, nil
}

// The client's phases: while ferry migrate runs, after it ended, during the carry-back and after.
const (
	during     = "during the run"
	after      = "after the run"
	carrying   = "during the carry-back"
	backOnBlue = "after the rollback"
)

// client sends requests to a URL without pause from two goroutines, as users would, and counts
// the answers (blue or green) under the phase in force when each request started, and the failures.
type client struct {
	phase  atomic.Value // string
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	counts map[string]map[string]int // phase → answer → requests
	failed []string
}

func startClient(url string) *client {
	ctx, cancel := context.WithCancel(context.Background())
	c := &client{cancel: cancel, counts: map[string]map[string]int{}}
	c.phase.Store(during)
	hc := &http.Client{Timeout: 10 * time.Second}
	for range 2 {
		c.wg.Go(func() {
			for ctx.Err() == nil {
				phase := c.phase.Load().(string)
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
				if err != nil {
					c.fail(err.Error())
					return
				}
				resp, err := hc.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						c.fail(err.Error())
						time.Sleep(50 * time.Millisecond)
					}
					continue
				}
				body, rerr := io.ReadAll(resp.Body)
				resp.Body.Close()
				switch {
				case rerr != nil && ctx.Err() != nil:
				case rerr != nil || resp.StatusCode != http.StatusOK:
					c.fail(fmt.Sprintf("%s %s %v", resp.Status, body, rerr))
				default:
					c.mu.Lock()
					if c.counts[phase] == nil {
						c.counts[phase] = map[string]int{}
					}
					c.counts[phase][string(body)]++
					c.mu.Unlock()
				}
				// A little pause leaves the two cores of a small machine to the run.
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	return c
}

func (c *client) fail(msg string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failed = append(c.failed, time.Now().Format("15:04:05.000")+" "+msg)
}

func (c *client) stop() {
	c.cancel()
	c.wg.Wait()
}

func (c *client) result() (map[string]map[string]int, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	counts := map[string]map[string]int{}
	for phase, answers := range c.counts {
		counts[phase] = maps.Clone(answers)
	}
	return counts, slices.Clone(c.failed)
}

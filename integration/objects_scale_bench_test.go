package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrykube/ferry/snapshot"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// BenchmarkObjectsAtScale backs up, restores, verifies and compares for a carry-back N objects
// (FERRY_BENCH_OBJECTS, comma-separated, default 100000: three ConfigMaps to a Secret of about
// 0.5 KiB, 1,000 to a namespace), and prints for each step ferry's objects/s and peak RSS beside
// a raw reference measured in the same run against the same API server: creates from client-go
// at ferry's concurrency (restore), paged LIST and JSON (backup, verify). The carry-back's
// comparison (reading the run's backup and green's, then comparing) runs in objbench, a small
// program on the same code. FERRY_BENCH_PROFILE names a folder for a CPU profile of each step.
// Run: make bench (or -bench ObjectsAtScale).
func BenchmarkObjectsAtScale(b *testing.B) {
	sizes := os.Getenv("FERRY_BENCH_OBJECTS")
	if sizes == "" {
		sizes = "100000"
	}
	metrics := map[int]map[string]float64{}
	for _, s := range strings.Split(sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1000 {
			b.Fatalf("FERRY_BENCH_OBJECTS: %q: want numbers of at least 1000", s)
		}
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			// One run at a size is the measurement (each step's rate is timed on its own); the
			// repeats -benchtime asks for would take as long again for the same figures.
			if metrics[n] == nil {
				metrics[n] = objectsAtScale(b, n)
			}
			for unit, v := range metrics[n] {
				b.ReportMetric(v, unit)
			}
		})
	}
}

const scaleConcurrency = 32 // ferry's objects at once: 4 × --parallel's default 8

func scaleObject(ns string, i int) (configMap *corev1.ConfigMap, secret *corev1.Secret) {
	payload := strings.Repeat("x", 512)
	meta := metav1.ObjectMeta{Name: fmt.Sprintf("obj-%04d", i), Namespace: ns, Labels: map[string]string{"bench": "scale"}}
	if i%4 == 3 {
		return nil, &corev1.Secret{ObjectMeta: meta, Data: map[string][]byte{"payload": []byte(payload)}}
	}
	return &corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{"payload": payload}}, nil
}

// createObjects creates n objects across namespaces prefix-NNN, at most concurrency at once, and
// returns the namespaces and how long the objects took.
func createObjects(ctx context.Context, kc kubernetes.Interface, prefix string, n, concurrency int) ([]string, time.Duration, error) {
	var namespaces []string
	for ns := 0; ns*1000 < n; ns++ {
		name := fmt.Sprintf("%s-%03d", prefix, ns)
		namespaces = append(namespaces, name)
		if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, 0, err
		}
	}
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(concurrency)
	for i := range n {
		g.Go(func() error {
			cm, secret := scaleObject(namespaces[i/1000], i%1000)
			var err error
			if cm != nil {
				_, err = kc.CoreV1().ConfigMaps(cm.Namespace).Create(gctx, cm, metav1.CreateOptions{})
			} else {
				_, err = kc.CoreV1().Secrets(secret.Namespace).Create(gctx, secret, metav1.CreateOptions{})
			}
			if apierrors.IsAlreadyExists(err) {
				return nil
			}
			return err
		})
	}
	err := g.Wait()
	return namespaces, time.Since(start), err
}

// listRate lists the namespaces' ConfigMaps and Secrets in pages of 500 and encodes each as JSON,
// as kubectl get -o json does, and returns objects per second.
func listRate(ctx context.Context, dyn dynamic.Interface, namespaces []string) (float64, int, error) {
	start := time.Now()
	var mu sync.Mutex
	total := 0
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, ns := range namespaces {
		for _, res := range []string{"configmaps", "secrets"} {
			g.Go(func() error {
				cont := ""
				for {
					list, err := dyn.Resource(corev1.SchemeGroupVersion.WithResource(res)).Namespace(ns).List(gctx, metav1.ListOptions{Limit: 500, Continue: cont})
					if err != nil {
						return err
					}
					for _, item := range list.Items {
						if _, err := json.Marshal(item.Object); err != nil {
							return err
						}
					}
					mu.Lock()
					total += len(list.Items)
					mu.Unlock()
					if cont = list.GetContinue(); cont == "" {
						return nil
					}
				}
			})
		}
	}
	err := g.Wait()
	return float64(total) / time.Since(start).Seconds(), total, err
}

type scaleRun struct {
	seconds float64
	rssMiB  float64
	out     []byte
}

// runMeasured runs cmd and measures its time and own peak RSS (runPeakRSS).
func runMeasured(b *testing.B, cmd *exec.Cmd) scaleRun {
	b.Helper()
	start := time.Now()
	out, kib, err := runPeakRSS(cmd, false)
	if err != nil {
		b.Fatalf("%s: %v\n%s", strings.Join(cmd.Args[:3], " "), err, out)
	}
	return scaleRun{seconds: time.Since(start).Seconds(), rssMiB: float64(kib) / 1024, out: out}
}

func objectsAtScale(b *testing.B, n int) map[string]float64 {
	ctx := context.Background()
	_, blueKC := clientsB(b, "blue")
	blueCluster := tb.Clusters["blue"]
	_, blueDyn, err := blueCluster.Clients()
	if err != nil {
		b.Fatal(err)
	}
	prefix := fmt.Sprintf("scale%dk", n/1000)
	namespaces, seeded, err := createObjects(ctx, blueKC, prefix, n, 64)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("%d objects on blue in %d namespaces (%s)", n, len(namespaces), seeded.Round(time.Millisecond))
	targetName := "bench-" + prefix
	target, ok := tb.Clusters[targetName]
	if !ok {
		if target, err = tb.AddCluster(ctx, targetName); err != nil {
			b.Fatal(err)
		}
	}
	targetKC, targetDyn, err := target.Clients()
	if err != nil {
		b.Fatal(err)
	}
	minio := tb.MinIO["backup"]
	if err := minio.CreateBucket(ctx, "backups"); err != nil {
		b.Fatal(err)
	}
	env := append(append(os.Environ(), "KUBECONFIG="+tb.Kubeconfig), minio.Env()...)
	url := "s3://backups/bench-scale?endpoint=" + minio.Endpoint + "&path-style=true"
	dir := b.TempDir()
	config := filepath.Join(dir, "ferry.yaml")
	if err := os.WriteFile(config, []byte("include: {namespaces: ["+strings.Join(namespaces, ", ")+"], resources: [configmaps, secrets]}\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	stamp := time.Now().Unix()
	// FERRY_BENCH_PROFILE names a folder for a CPU profile of each step (ferry's --profile).
	profiles := os.Getenv("FERRY_BENCH_PROFILE")
	ferry := func(args ...string) *exec.Cmd {
		global := []string{"--storage", url}
		if profiles != "" {
			global = append(global, "--profile", "cpu", "--profile-output", filepath.Join(profiles, fmt.Sprintf("%d-%s.pprof", n, args[0])))
		}
		cmd := exec.Command(ferryBinary(b), ferryArgs(b, append(global, args...))...)
		cmd.Env = env
		return cmd
	}
	var maps, mapFlags []string
	for _, ns := range namespaces {
		maps = append(maps, ns+"="+ns+"-r")
		mapFlags = append(mapFlags, "-map", ns+"="+ns+"-r")
	}
	line := func(what string, ferryRate, rawRate, rss float64, raw string) {
		ratio := "-"
		if rawRate > 0 {
			ratio = fmt.Sprintf("%.2f", ferryRate/rawRate)
		}
		fmt.Printf("objects-at-scale %7d %-22s ferry %8.0f objects/s  peak RSS %6.0f MiB | %-34s %8.0f objects/s | ratio %s\n", n, what, ferryRate, rss, raw, rawRate, ratio)
	}

	// Backup, beside a paged LIST with JSON of the same objects.
	backupName := fmt.Sprintf("%s-%d", prefix, stamp)
	rawList, listed, err := listRate(ctx, blueDyn, namespaces)
	if err != nil || listed < n {
		b.Fatalf("raw list: %d objects, %v", listed, err)
	}
	bk := runMeasured(b, ferry("backup", "--from", "blue", "-f", config, "--name", backupName))
	line("backup", float64(n)/bk.seconds, rawList, bk.rssMiB, "raw paged LIST + JSON (blue)")

	// Restore, beside client-go creates of the same objects at ferry's concurrency.
	_, rawTook, err := createObjects(ctx, targetKC, prefix+"-raw", n, scaleConcurrency)
	if err != nil {
		b.Fatal(err)
	}
	rawCreate := float64(n) / rawTook.Seconds()
	rs := runMeasured(b, ferry("restore", "--to", targetName, "--backup", backupName, "--namespace-map", strings.Join(maps, ","), "-o", "json"))
	var rep struct {
		Counts map[string]map[string]int `json:"counts"`
	}
	if err := json.Unmarshal(rs.out, &rep); err != nil || rep.Counts["objects"][snapshot.StatusRestored] != n {
		b.Fatalf("ferry restore: %v %v", err, rep.Counts)
	}
	line("restore", float64(n)/rs.seconds, rawCreate, rs.rssMiB, "raw client-go creates (target)")

	// Verify, beside a paged LIST with JSON of the restored objects.
	var restored []string
	for _, ns := range namespaces {
		restored = append(restored, ns+"-r")
	}
	rawVerify, _, err := listRate(ctx, targetDyn, restored)
	if err != nil {
		b.Fatal(err)
	}
	vf := runMeasured(b, ferry("verify", "--to", targetName, "--backup", backupName, "--namespace-map", strings.Join(maps, ","), "-o", "json"))
	if err := json.Unmarshal(vf.out, &rep); err != nil || rep.Counts["objects"][snapshot.StatusIdentical] != n {
		b.Fatalf("ferry verify: %v %v", err, rep.Counts)
	}
	line("verify", float64(n)/vf.seconds, rawVerify, vf.rssMiB, "raw paged LIST + JSON (target)")

	// The carry-back's comparison: the target's copy backed up as green's, compared with the run's.
	greenConfig := filepath.Join(dir, "green.yaml")
	if err := os.WriteFile(greenConfig, []byte("include: {namespaces: ["+strings.Join(restored, ", ")+"], resources: [configmaps, secrets]}\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	greenName := backupName + "-green"
	runMeasured(b, ferry("backup", "--from", targetName, "-f", greenConfig, "--name", greenName))
	objbench := buildObjbench(b)
	cmp := exec.Command(objbench, append([]string{"-mode", "compare", "-storage", url, "-original", backupName, "-carried", greenName}, mapFlags...)...)
	cmp.Env = env
	cr := runMeasured(b, cmp)
	var got struct{ Objects, Created, Changed, Deleted int }
	if err := json.Unmarshal(cr.out, &got); err != nil || got.Objects != n || got.Created+got.Changed+got.Deleted != 0 {
		b.Fatalf("objbench compare: %v %s", err, cr.out)
	}
	line("carry-back comparison", float64(n)/cr.seconds, 0, cr.rssMiB, "-")
	metrics := map[string]float64{"objects": float64(n), "restore-objects/s": float64(n) / rs.seconds, "restore-peak-RSS-MiB": rs.rssMiB,
		"verify-objects/s": float64(n) / vf.seconds, "verify-peak-RSS-MiB": vf.rssMiB, "compare-peak-RSS-MiB": cr.rssMiB}

	if profiles != "" {
		// The restore again, into other namespaces, with a CPU profile.
		var again []string
		for _, ns := range namespaces {
			again = append(again, "-map", ns+"="+ns+"-p")
		}
		pr := exec.Command(objbench, append([]string{"-mode", "restore", "-storage", url, "-original", backupName, "-context", targetName, "-cpuprofile", filepath.Join(profiles, fmt.Sprintf("%d-restore-objbench.pprof", n))}, again...)...)
		pr.Env = env
		p := runMeasured(b, pr)
		b.Logf("profiled restore: %s", p.out)
		line("restore (profiled)", float64(n)/p.seconds, rawCreate, p.rssMiB, "raw client-go creates (target)")
	}
	return metrics
}

var (
	objbenchOnce sync.Once
	objbenchPath string
	objbenchErr  error
)

func buildObjbench(b *testing.B) string {
	objbenchOnce.Do(func() {
		path := filepath.Join(os.TempDir(), fmt.Sprintf("ferry-objbench-%d", os.Getpid()))
		out, err := exec.Command("go", "build", "-o", path, "./testdata/objbench").CombinedOutput()
		if err != nil {
			objbenchErr = fmt.Errorf("%v: %s", err, out)
		}
		objbenchPath = path
	})
	if objbenchErr != nil {
		b.Fatal(objbenchErr)
	}
	return objbenchPath
}

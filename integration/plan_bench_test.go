package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/internal/memwatch"
	"github.com/ferrykube/ferry/plans"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Blue's 20,000 ConfigMaps that BenchmarkPlan20k and BenchmarkBackupObjects20k work on.
const (
	benchNamespaces   = 20
	benchPerNamespace = 1000
)

// fillBlue20k creates, unless they are there already, 20,000 ConfigMaps of about 0.5 KiB across the
// namespaces bench-00 to bench-19 on blue, and returns the namespaces.
func fillBlue20k(b *testing.B) []string {
	b.Helper()
	_, kc := clients(b, "blue")
	ctx := context.Background()
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(64)
	payload := strings.Repeat("x", 512)
	var names []string
	for n := range benchNamespaces {
		ns := fmt.Sprintf("bench-%02d", n)
		names = append(names, ns)
		if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			b.Fatal(err)
		}
		for i := range benchPerNamespace {
			g.Go(func() error {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%04d", i), Labels: map[string]string{"bench": "plan"}},
					Data: map[string]string{"payload": payload}}
				_, err := kc.CoreV1().ConfigMaps(ns).Create(gctx, cm, metav1.CreateOptions{})
				if apierrors.IsAlreadyExists(err) {
					return nil
				}
				return err
			})
		}
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	b.Logf("%d ConfigMaps on blue after %s", benchNamespaces*benchPerNamespace, time.Since(start).Round(time.Millisecond))
	return names
}

// BenchmarkPlan20k plans blue after filling it with 20,000 ConfigMaps across 20 namespaces, and
// reports objects planned per second and the peak heap. Run: make bench.
func BenchmarkPlan20k(b *testing.B) {
	fillBlue20k(b)
	ctx := context.Background()
	cl, _, _ := planClients(b, "blue")
	var objects int
	peak := memwatch.Peak(func() {
		b.ResetTimer()
		defer b.StopTimer()
		for range b.N {
			p, err := plans.Inventory(ctx, cl, plans.Options{Config: testbedConfig(b).Planning})
			if err != nil {
				b.Fatal(err)
			}
			objects = p.Estimate.Objects
			for _, e := range p.Excluded {
				objects += e.Count
			}
		}
	})
	if objects < benchNamespaces*benchPerNamespace {
		b.Fatalf("planned %d objects, want at least %d", objects, benchNamespaces*benchPerNamespace)
	}
	b.ReportMetric(float64(objects)*float64(b.N)/b.Elapsed().Seconds(), "objects/s")
	b.ReportMetric(float64(objects), "objects")
	b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
}

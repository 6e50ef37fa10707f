package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/migrate"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BenchmarkVerifiedCutover migrates blue (the Kubeflow fixture when FERRY_FIXTURES names it, as
// make bench does when the fixture is beside the checkout, see README.md's notes on the testbed;
// else the sample platform, with its database, its bucket and a claim of 256 MiB and 2,000 files)
// onto a new cluster with ferry migrate behind HAProxy, and reports the time from the run's start to green
// serving all traffic, verified. Beside each phase (backup, restore, verify) it prints, from
// ferry's own log of the same run, each kind's time, their sum (the phase's time if the kinds ran
// one after another) and the longest: a phase that runs its kinds at the same time takes about the
// longest, not the sum. After each iteration the run is rolled back (green's writes, the benchmark's own traffic,
// left behind), so blue's writers run again.
// Run: make bench.
func BenchmarkVerifiedCutover(b *testing.B) {
	blueMySQL(b)
	blueMinIO(b)
	blue, bkc := clients(b, "blue")
	ctx := context.Background()
	const ns, claim = "cutover-lab", "datasets"
	createClaim(b, bkc, ns, claim, nil)
	b.Cleanup(func() {
		bkc.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
		bkc.CoreV1().PersistentVolumes().Delete(context.Background(), "pv-"+ns+"-"+claim, metav1.DeleteOptions{})
	})
	src := dataDir(b, claim+"-cutover")
	rng := rand.NewChaCha8([32]byte{15})
	big := make([]byte, 256<<20)
	rng.Read(big)
	must := func(err error) {
		b.Helper()
		if err != nil {
			b.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(src, "train.bin"), big, 0o644))
	for i := range 2000 {
		dir := filepath.Join(src, "samples", fmt.Sprintf("%02d", i%50))
		must(os.MkdirAll(dir, 0o755))
		must(os.WriteFile(filepath.Join(dir, fmt.Sprintf("%04d.json", i)), []byte(fmt.Sprintf(`{"sample": %d}`, i)), 0o644))
	}
	must(blue.BindClaim(ctx, ns, claim, src))

	blueSrv, greenSrv := colorServer(b, "blue", nil), colorServer(b, "green", nil)
	h, err := tb.StartHAProxy(ctx, "cutover-bench", blueSrv.Listener.Addr().String(), greenSrv.Listener.Addr().String())
	must(err)
	b.Cleanup(func() { h.Stop() })
	url := backupMinIO(b, "cutover-bench")
	config := migrateConfig(b, h, greenSrv.URL)

	// The messages of ferry's log that end a kind's part of each phase.
	phaseMessages := map[migrate.State]string{migrate.BackedUp: "captured", migrate.Restored: "restored", migrate.Verified: "verified"}
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		target := fmt.Sprintf("cutover-bench-%d", i)
		c, err := tb.AddCluster(ctx, target)
		must(err)
		must(tb.ServePlatform(ctx, c, "green"))
		b.StartTimer()
		code, out, errOut := runFerry(b, "--storage", url, "--log-format", "json", "migrate", "--from", "blue", "--to", target, "-f", config, "--allow-skipped")
		b.StopTimer()
		id := runID(b, errOut)
		wantEnded(b, url, id, "ferry migrate", code, out, lastLines(errOut, 20))
		rep := migrate.BuildReport(journal(b, url, id))
		kinds := kindTimes(b, errOut)
		b.Logf("run %s: verified cutover in %.1f s", id, rep.VerifiedCutoverSeconds)
		for _, p := range rep.Phases {
			step := ""
			if p.Step > 0 {
				step = fmt.Sprintf(" %d %%", p.Step)
			}
			line := fmt.Sprintf("  %-12s %7.1f s", string(p.State)+step, p.Seconds)
			if k, ok := kinds[phaseMessages[p.State]]; ok && p.Step == 0 {
				var sum, longest time.Duration
				var each []string
				for _, kind := range []string{"objects", "databases", "buckets", "volumes"} {
					if d, ok := k[kind]; ok {
						sum += d
						longest = max(longest, d)
						each = append(each, fmt.Sprintf("%s %.1f s", kind, d.Seconds()))
					}
				}
				line += fmt.Sprintf("   kinds: %s; sum %.1f s, longest %.1f s, phase/sum %.2f", strings.Join(each, ", "), sum.Seconds(), longest.Seconds(), p.Seconds/sum.Seconds())
				b.ReportMetric(p.Seconds, string(p.State)+"-s")
				b.ReportMetric(sum.Seconds(), string(p.State)+"-kinds-sum-s")
			}
			b.Log(line)
		}
		b.ReportMetric(rep.VerifiedCutoverSeconds, "verified-cutover-s")
		// Green's writes are the benchmark's own traffic: the rollback leaves them behind.
		if code, out, errOut := runFerry(b, "--storage", url, "rollback", "--run", id, "--discard-green-writes"); code != 0 {
			b.Fatalf("ferry rollback exited %d\nstdout: %s\nstderr: %s", code, out, lastLines(errOut, 20))
		}
		b.StartTimer()
	}
}

// kindTimes reads ferry's JSON log: message ("captured", "restored", "verified") → kind → took.
func kindTimes(b testing.TB, log string) map[string]map[string]time.Duration {
	out := map[string]map[string]time.Duration{}
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line struct {
			Msg  string          `json:"msg"`
			Kind string          `json:"kind"`
			Took json.RawMessage `json:"took"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil || line.Kind == "" || line.Took == nil {
			continue
		}
		var took time.Duration
		var s string
		if json.Unmarshal(line.Took, &s) == nil {
			d, err := time.ParseDuration(s)
			if err != nil {
				b.Fatalf("took %q in ferry's log: %v", s, err)
			}
			took = d
		} else if err := json.Unmarshal(line.Took, &took); err != nil {
			b.Fatalf("took %s in ferry's log: %v", line.Took, err)
		}
		if out[line.Msg] == nil {
			out[line.Msg] = map[string]time.Duration{}
		}
		out[line.Msg][line.Kind] = took
	}
	return out
}

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrykube/ferry/integration/testbed"
	"github.com/ferrykube/ferry/migrate"
	"github.com/ferrykube/ferry/storage"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// cutover is a fresh cluster for the blue-green runs, served like a real green: a provisioner, and
// its database and MinIO pods served by the testbed's green servers.
func cutover(t *testing.T) (*testbed.Cluster, kubernetes.Interface) {
	t.Helper()
	testbed.Require(t, tb)
	ctx := context.Background()
	c, ok := tb.Clusters["cutover"]
	if !ok {
		var err error
		if c, err = tb.AddCluster(ctx, "cutover"); err != nil {
			t.Fatal(err)
		}
		if err := tb.ServePlatform(ctx, c, "green"); err != nil {
			t.Fatal(err)
		}
	}
	kc, _, err := c.Clients()
	if err != nil {
		t.Fatal(err)
	}
	return c, kc
}

// migrateConfig writes a ferry.yaml for a run behind the HAProxy h: steps of 10, 50 and 100 %
// soaked 3 s, watched every 500 ms by an HTTP gate on green with a failure budget of 1.
func migrateConfig(t testing.TB, h *testbed.HAProxy, greenURL string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "ferry.yaml")
	if err := os.WriteFile(file, []byte(h.MigrateConfig(greenURL, 3*time.Second, 500*time.Millisecond, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

var runIDPattern = regexp.MustCompile(`Run (run-[0-9]{8}-[0-9]{6}-[0-9a-f]{6})`)

func runID(t testing.TB, stderr string) string {
	t.Helper()
	m := runIDPattern.FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("no run ID in ferry's output:\n%s", stderr)
	}
	return m[1]
}

func journal(t testing.TB, url, id string) *migrate.Journal {
	t.Helper()
	store, err := storage.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	j, err := migrate.OpenJournal(context.Background(), store, id)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// endedExit is the exit of a ferry migrate or finalize of run id that went on with
// --allow-skipped and ended: 0, or 3 when the run's backup skipped items, which green lacks; and
// what ferry then says. The run's report must list every item the backup's manifest names.
func endedExit(t testing.TB, url, id string) (int, string) {
	t.Helper()
	_, m := readManifest(t, url, id)
	where, skipped := migrate.BuildReport(journal(t, url, id)).Lacking()
	for _, s := range m.Skipped {
		if !slices.Contains(skipped, s) {
			t.Errorf("the run's report does not list %s %s, which its backup skipped (it lists %+v)", s.Kind, s.Name, skipped)
		}
	}
	if len(skipped) == 0 {
		return 0, ""
	}
	return 3, fmt.Sprintf("%s lacks %d items its backup skipped", where, len(skipped))
}

// wantEnded fails the test unless command, a ferry migrate, finalize or rollback of run id, ended
// (endedExit).
func wantEnded(t testing.TB, url, id, command string, code int, out, errOut string) {
	t.Helper()
	if want, says := endedExit(t, url, id); code != want || !strings.Contains(errOut, says) {
		t.Fatalf("%s exited %d, want %d (%q)\nstdout: %s\nstderr: %s", command, code, want, says, out, errOut)
	}
}

// replicasOf reads a Deployment's replicas and whether it carries ferry's quiesce record.
func replicasOf(t *testing.T, kc kubernetes.Interface, ns, name string) (int32, bool) {
	t.Helper()
	d, err := kc.AppsV1().Deployments(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, quiesced := d.Annotations[migrate.QuiescedAnnotation]
	return *d.Spec.Replicas, quiesced
}

// TestMigrateRollsBackWhenAGateFails: green starts answering 503 once it gets half the traffic;
// the gate fails at the 50 % step and traffic is back on blue's saved state within the interval
// times the failure budget (and the soak's start), the journal says why. Green may have taken
// writes, so the writers stay as they were (blue's stopped) until the operator chooses: a
// rollback discarding them then starts blue's and stops green's.
func TestMigrateRollsBackWhenAGateFails(t *testing.T) {
	blueMySQL(t)
	blueMinIO(t)
	_, greenKC := cutover(t)
	_, blueKC := clients(t, "blue")
	ctx := context.Background()
	var failing atomic.Bool
	blueSrv, greenSrv := colorServer(t, "blue", nil), colorServer(t, "green", &failing)
	h, err := tb.StartHAProxy(ctx, "gate-fails", blueSrv.Listener.Addr().String(), greenSrv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Stop() }) // after later cleanups, which may roll back through it
	// Green breaks when HAProxy gives it half the traffic; then the watch notes when green's weight
	// is back to none.
	broke, restored := make(chan time.Time, 1), make(chan time.Time, 1)
	go func() {
		for range time.Tick(20 * time.Millisecond) {
			out, err := h.Command(ctx, "get weight app/green")
			w, _, _ := strings.Cut(out, " ")
			n, _ := strconv.Atoi(w)
			switch {
			case err != nil:
			case !failing.Load() && n >= 128:
				failing.Store(true)
				broke <- time.Now()
			case failing.Load() && n == 0:
				restored <- time.Now()
				return
			}
		}
	}()
	writers, _ := replicasOf(t, blueKC, "kubeflow", "ml-pipeline")
	url := backupMinIO(t, "migrate-gate")
	code, out, errOut := runFerry(t, "--storage", url, "migrate", "--from", "blue", "--to", "cutover", "-f", migrateConfig(t, h, greenSrv.URL), "--allow-skipped")
	if code != 3 || !strings.Contains(errOut, "traffic is back on blue") || !strings.Contains(errOut, "--discard-green-writes") {
		t.Fatalf("ferry migrate exited %d, want 3, traffic back on blue and the ways on\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	back, err := h.Command(ctx, "get weight app/green")
	if err != nil || !strings.HasPrefix(back, "0 ") {
		t.Errorf("green's weight after the gate failed: %q (%v), want 0", back, err)
	}
	id := runID(t, errOut)
	j := journal(t, url, id)
	if _, began := j.Last(migrate.RolledBack, migrate.Begin, 0); began {
		t.Error("the gate rolled the writers back: green's writes could no longer be carried back")
	}
	if rep := migrate.BuildReport(j); len(rep.TrafficSteps) == 0 || rep.TrafficSteps[len(rep.TrafficSteps)-1].Result != migrate.Failed {
		t.Fatalf("the journal should say the gate failed at 50 %%: %+v", rep)
	}
	// Traffic went back within the interval × (budget + 1) after green broke, with a second for
	// HAProxy's runtime API and the journal.
	select {
	case at := <-broke:
		back := <-restored
		if took, limit := back.Sub(at), 500*time.Millisecond*2+time.Second; took > limit {
			t.Errorf("traffic went back to blue %s after green broke, want within %s", took, limit)
		} else {
			t.Logf("traffic back on blue %s after green broke", took.Round(time.Millisecond))
		}
	default:
		t.Error("green never got half the traffic")
	}
	if got, quiesced := replicasOf(t, blueKC, "kubeflow", "ml-pipeline"); got != 0 || !quiesced {
		t.Errorf("blue's ml-pipeline after the gate failed: %d replicas (quiesce record %v), want it stopped until the operator chooses", got, quiesced)
	}
	if code, out, errOut := runFerry(t, "--storage", url, "rollback", "--run", id, "--discard-green-writes"); code != 0 {
		t.Fatalf("ferry rollback --discard-green-writes exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if rep := migrate.BuildReport(journal(t, url, id)); rep.State != migrate.RolledBack {
		t.Errorf("state after the rollback %q, want rolled-back", rep.State)
	}
	if got, quiesced := replicasOf(t, blueKC, "kubeflow", "ml-pipeline"); got != writers || quiesced {
		t.Errorf("blue's ml-pipeline: %d replicas (quiesce record %v), want its %d back", got, quiesced, writers)
	}
	if got, quiesced := replicasOf(t, greenKC, "kubeflow", "ml-pipeline"); got != 0 || !quiesced {
		t.Errorf("green's ml-pipeline after the rollback: %d replicas (quiesce record %v), want stopped", got, quiesced)
	}
}

// TestMigrateSurvivesBeingKilledInEachState runs the blue-green migration with a client sending
// requests all along, kills ferry (SIGKILL) right after an event of each state and resumes it: the
// run finishes with green serving all traffic, verified, the client saw no failed request, and no
// finished step ran twice (the journal, and the restored objects on green untouched since).
func TestMigrateSurvivesBeingKilledInEachState(t *testing.T) {
	blueMySQL(t)
	blueMinIO(t)
	_, greenKC := cutover(t)
	_, blueKC := clients(t, "blue")
	ctx := context.Background()
	blueSrv, greenSrv := colorServer(t, "blue", nil), colorServer(t, "green", nil)
	h, err := tb.StartHAProxy(ctx, "kill-resume", blueSrv.Listener.Addr().String(), greenSrv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Stop() }) // after later cleanups, which may roll back through it
	client := startTrafficClient(t, h.URL)
	writers, _ := replicasOf(t, blueKC, "kubeflow", "ml-pipeline")
	url := backupMinIO(t, "migrate-kill")
	config := migrateConfig(t, h, greenSrv.URL)
	common := []string{"--storage", url, "migrate", "--lease-ttl", testLeaseTTL.String(), "--allow-skipped"}

	crashes := []string{"planned:done", "preflighted:begin", "quiesced:done", "backed-up:begin", "restored:done", "verified:done",
		"shifting:done", "shifting@10:done", "shifting@50:begin", "shifting@100:done"}
	var id string
	var restoredVersions map[string]string
	for i, at := range crashes {
		args := append(append([]string{}, common...), "--crash-at", at)
		if i == 0 {
			args = append(args, "--from", "blue", "--to", "cutover", "-f", config)
		} else {
			args = append(args, "--resume", id)
		}
		code, _, errOut := runFerry(t, args...)
		if code != -1 { // killed by its signal
			t.Fatalf("ferry should have been killed at %s, exited %d\nstderr: %s", at, code, errOut)
		}
		if i == 0 {
			id = runID(t, errOut)
		}
		if at == "restored:done" {
			restoredVersions = resourceVersions(t, greenKC, "kubeflow")
		}
		time.Sleep(testLeaseTTL + 100*time.Millisecond) // the killed run's lease expires
	}
	code, out, errOut := runFerry(t, append(append([]string{}, common...), "--resume", id)...)
	wantEnded(t, url, id, "the last resume", code, out, errOut)
	if !strings.Contains(out, "shifted") {
		t.Fatalf("the last resume did not shift\nstdout: %s\nstderr: %s", out, errOut)
	}

	j := journal(t, url, id)
	begins, dones := map[string]int{}, map[string]int{}
	for _, e := range j.Events() {
		key := string(e.State)
		if e.Step > 0 {
			key += "@" + strconv.Itoa(e.Step)
		}
		switch e.Phase {
		case migrate.Begin:
			begins[key]++
		case migrate.Done:
			dones[key]++
		case migrate.Failed:
			t.Errorf("event %d: %s failed: %s", e.Seq, key, e.Detail)
		}
	}
	for _, key := range []string{"planned", "preflighted", "quiesced", "backed-up", "restored", "verified", "shifting", "shifting@10", "shifting@50", "shifting@100", "shifted"} {
		if dones[key] != 1 {
			t.Errorf("%s finished %d times, want once", key, dones[key])
		}
		want := 1
		if key == "preflighted" || key == "backed-up" || key == "shifting@50" {
			want = 2 // killed after it began: begun again, finished once
		}
		if begins[key] != want {
			t.Errorf("%s began %d times, want %d", key, begins[key], want)
		}
	}
	rep := migrate.BuildReport(j)
	if rep.Verification == nil || len(rep.Verification.Items) > 0 || rep.VerifiedCutoverSeconds == 0 {
		t.Errorf("the report should hold a clean verification and the time to the cutover: %+v", rep)
	}
	if got := resourceVersions(t, greenKC, "kubeflow"); len(got) == 0 || !sameVersions(restoredVersions, got) {
		t.Errorf("objects restored on green changed after the restore was done: the restore ran again?")
	}
	if w, err := h.Command(ctx, "get weight app/blue"); err != nil || !strings.HasPrefix(w, "0 ") {
		t.Errorf("blue's weight at the end: %q (%v), want 0", w, err)
	}
	if got, _ := replicasOf(t, greenKC, "kubeflow", "ml-pipeline"); got != writers {
		t.Errorf("green's ml-pipeline runs %d replicas, want blue's %d", got, writers)
	}
	if _, quiesced := replicasOf(t, blueKC, "kubeflow", "ml-pipeline"); !quiesced {
		t.Error("blue's writers should stay stopped after the cutover (blue is the way back, read-only)")
	}
	client.phase.Store("after")
	if share := client.share(t, "after", 100); share != 100 {
		t.Errorf("after the run green took %.1f%% of the requests, want all", share)
	}
	client.mu.Lock()
	if len(client.failed) > 0 {
		t.Errorf("the client saw %d failed requests during the run, e.g. %s", len(client.failed), client.failed[0])
	}
	data, _ := json.Marshal(rep.TrafficSteps)
	t.Logf("run %s: cutover in %.1fs; steps %s; requests %v", id, rep.VerifiedCutoverSeconds, data, client.counts)
	client.mu.Unlock()

	// A flip by hand: half the traffic back to blue, journaled.
	code, out, errOut = runFerry(t, "--storage", url, "flip", "--run", id, "--to", "blue", "--weight", "50")
	if code != 0 {
		t.Fatalf("ferry flip exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	for _, server := range []string{"blue", "green"} {
		if w, err := h.Command(ctx, "get weight app/"+server); err != nil || !strings.HasPrefix(w, "128 ") {
			t.Errorf("%s's weight after flipping half to blue: %q (%v), want 128", server, w, err)
		}
	}
	if _, ok := lastNote(journal(t, url, id), "flipped by hand: blue 50% / green 50%"); !ok {
		t.Error("the journal should record the flip")
	}

	// Green has served everything: rolling back would drop its writes, so ferry refuses and says
	// what would be lost, unless told to discard them — which the journal records.
	code, out, errOut = runFerry(t, "--storage", url, "rollback", "--run", id)
	if code != 4 || !strings.Contains(errOut, "database kfp-mysql") || !strings.Contains(errOut, "--discard-green-writes") {
		t.Fatalf("rollback after the cutover should refuse (exit 4) naming what green holds; exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	code, out, errOut = runFerry(t, "--storage", url, "rollback", "--run", id, "--discard-green-writes")
	if code != 0 {
		t.Fatalf("rollback --discard-green-writes exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if w, err := h.Command(ctx, "get weight app/green"); err != nil || !strings.HasPrefix(w, "0 ") {
		t.Errorf("green's weight after the rollback: %q (%v), want 0", w, err)
	}
	if got, quiesced := replicasOf(t, blueKC, "kubeflow", "ml-pipeline"); got != writers || quiesced {
		t.Errorf("blue's ml-pipeline after the rollback: %d replicas (quiesce record %v), want %d running", got, quiesced, writers)
	}
	discarded := false
	for _, e := range journal(t, url, id).Events() {
		discarded = discarded || (e.Phase == migrate.Note && strings.HasPrefix(e.Detail, migrate.NoteWritesDiscarded+" by "))
	}
	if !discarded {
		t.Error("the journal should record who discarded green's writes")
	}
}

// resourceVersions of the ConfigMaps and Secrets of a namespace: any write changes them.
func resourceVersions(t *testing.T, kc kubernetes.Interface, ns string) map[string]string {
	t.Helper()
	out := map[string]string{}
	cms, err := kc.CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cms.Items {
		out["configmap/"+c.Name] = c.ResourceVersion
	}
	secrets, err := kc.CoreV1().Secrets(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets.Items {
		out["secret/"+s.Name] = s.ResourceVersion
	}
	return out
}

func sameVersions(a, b map[string]string) bool {
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return len(a) > 0
}

func lastNote(j *migrate.Journal, detail string) (migrate.Event, bool) {
	events := j.Events()
	for i := len(events) - 1; i >= 0; i-- {
		if events[i].Phase == migrate.Note && events[i].Detail == detail {
			return events[i], true
		}
	}
	return migrate.Event{}, false
}

package integration

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/ferrykube/ferry/integration/testbed"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// zooGreen is a fresh cluster for the zoo's run, served like a real green: a provisioner, the
// platform's and the zoo's database and MinIO pods served by the testbed's green servers.
func zooGreen(t *testing.T) *testbed.Cluster {
	t.Helper()
	ctx := context.Background()
	c, ok := tb.Clusters["zoo-green"]
	if ok {
		return c
	}
	c, err := tb.AddCluster(ctx, "zoo-green")
	if err != nil {
		t.Fatal(err)
	}
	if err := tb.ServePlatform(ctx, c, "green"); err != nil {
		t.Fatal(err)
	}
	if err := tb.ServeZoo(ctx, c, "green", dataDir(t, "zoo-green-postgres-exec")); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestZooMigratesAndCarriesBackExactly applies the zoo (testbed.ApplyZoo: StatefulSet databases,
// a quota'd Profile namespace, restricted Pod Security, LONGBLOB rows of 10 and 40 MiB, three
// revisions of each workload kind, explicit node ports, immutable and finalized objects, CRs
// stored in a non-storage version, odd files, bucket keys near 1,024 bytes, endpoints written by
// hand, a service account token someone asked for) to blue, migrates it
// to a fresh green with ferry migrate --warm (claims and buckets copied while blue is live), and
// has the independent checker compare blue and green: every object, file, table and bucket
// object. Then kubectl rollout history and undo on green,
// writes of every kind on green, ferry rollback --carry-back, and the checker again: blue equals
// green. Nothing may differ beyond the checker's allow-list. Both API servers reset some of the
// exec and port-forward streams of either command on the way (resetProxy).
func TestZooMigratesAndCarriesBackExactly(t *testing.T) {
	blueMySQL(t)
	blueMinIO(t)
	blue, blueKC := clients(t, "blue")
	green := zooGreen(t)
	removeClustersAfter(t, green.Name)
	greenKC, _, err := green.Clients()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cleanup := func() {
		cctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if err := tb.RemoveZoo(cctx, blue, "blue"); err != nil {
			t.Logf("remove the zoo from blue: %v", err)
		}
		if err := tb.RemoveZoo(cctx, green, "green"); err != nil {
			t.Logf("remove the zoo from green: %v", err)
		}
	}
	cleanup() // what an interrupted earlier run may have left
	start := time.Now()
	zoo, err := tb.ApplyZoo(ctx, blue, tb.DataDir, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the zoo applied to blue in %s: %d namespaces, %d claims, %d bucket keys, %d workloads with history",
		time.Since(start).Round(100*time.Millisecond), len(zoo.Namespaces), len(zoo.Claims), len(zoo.BucketKeys), len(zoo.Rollouts))
	blueSide := side{name: "blue", cluster: blue, mariadb: tb.MariaDB["blue"], pg: tb.Postgres["blue"], minio: tb.MinIO["blue"]}
	greenSide := side{name: "green", cluster: green, mariadb: tb.MariaDB["green"], pg: tb.Postgres["green"], minio: tb.MinIO["green"]}
	scope := zooScope(zoo)
	blueHistory := map[string][]string{}
	for _, r := range zoo.Rollouts {
		blueHistory[r.Kind+"/"+r.Name] = rolloutHistory(t, blue, r)
		if want := wantHistory(r.Causes); !slices.Equal(blueHistory[r.Kind+"/"+r.Name], want) {
			t.Fatalf("the zoo's %s %s on blue has the history %q, want %q", r.Kind, r.Name, blueHistory[r.Kind+"/"+r.Name], want)
		}
	}

	// 1. The migration, behind HAProxy.
	blueSrv, greenSrv := colorServer(t, "blue", nil), colorServer(t, "green", nil)
	h, err := tb.StartHAProxy(ctx, "zoo", blueSrv.Listener.Addr().String(), greenSrv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Stop() }) // after later cleanups, which may roll back through it
	config := filepath.Join(t.TempDir(), "ferry.yaml")
	if err := os.WriteFile(config, []byte(h.MigrateConfig(greenSrv.URL, time.Second, 250*time.Millisecond, 1)+zoo.Config), 0o644); err != nil {
		t.Fatal(err)
	}
	url := backupMinIO(t, "zoo")
	// Both API servers drop streams, as one restarting or a load balancer does: of the streams
	// that carry 256 KiB, every third is reset, twice in each command (a stream that breaks is
	// run again up to 3 times: two resets can never fail one).
	proxies := map[string]*resetProxy{
		"blue":      startResetProxy(t, apiServerAddr(t, "blue"), 256<<10, 3, 2),
		"zoo-green": startResetProxy(t, apiServerAddr(t, "zoo-green"), 256<<10, 3, 2),
	}
	kubeconfig := proxiedKubeconfig(t, proxies)
	logResets := func(command string) {
		total := 0
		for _, name := range []string{"blue", "zoo-green"} {
			streams, resets := proxies[name].counts()
			t.Logf("%s: %s's proxy saw %d streams and reset %d", command, name, streams, resets)
			proxies[name].arm(3, 2)
			total += resets
		}
		if total == 0 {
			t.Errorf("%s: no stream was reset; the test broke nothing", command)
		}
	}
	start = time.Now()
	// Warm: the claims and the buckets are copied while blue is live, then what changed since.
	code, out, errOut := runFerry(t, "--kubeconfig", kubeconfig, "--storage", url, "migrate", "--from", "blue", "--to", "zoo-green", "-f", config, "--allow-skipped", "--warm", "--lease-ttl", testLeaseTTL.String())
	took := time.Since(start)
	var id string
	if m := runIDPattern.FindStringSubmatch(errOut); m != nil {
		id = m[1]
	}
	rolledBack := false
	t.Cleanup(func() {
		if id != "" && !rolledBack { // blue's writers back, whatever happened
			if code, _, errOut := runFerry(t, "--storage", url, "rollback", "--run", id, "--discard-green-writes"); code != 0 {
				t.Logf("clean up: ferry rollback --discard-green-writes exited %d: %s", code, lastLines(errOut, 5))
			}
		}
		cleanup()
	})
	ended := id != ""
	if ended { // exit 3 when the report lists what the backup skipped
		want, says := endedExit(t, url, id)
		ended = code == want && strings.Contains(errOut, says)
	}
	if !ended {
		t.Errorf("ferry migrate of the zoo exited %d after %s, want it ended\nstdout: %s\nstderr (end): %s", code, took.Round(time.Second), out, lastLines(errOut, 30))
	} else {
		t.Logf("ferry migrate of the zoo took %s, exit %d", took.Round(100*time.Millisecond), code)
	}
	logResets("ferry migrate")

	// 2. The independent checker: green holds what blue holds.
	failing := requireSame(t, "after ferry migrate", blueSide, greenSide, scope)
	// The checker leaves out kube-system, which each cluster keeps for itself: blue's stays.
	if _, err := greenKC.CoreV1().ConfigMaps("kube-system").Get(ctx, testbed.ZooClusterOwn, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("green has blue's kube-system/%s (get: %v): the cluster's own namespace moved", testbed.ZooClusterOwn, err)
	}
	// The checker leaves out what each token controller fills: green's token is green's own.
	if who := tokenUser(t, green, filledToken(t, greenKC, "zoo-apps", "ci-token")); who != "system:serviceaccount:zoo-apps:ci" {
		t.Errorf("green takes the zoo's ci-token as %q, want the ServiceAccount ci", who)
	}
	if !ended {
		t.Fatalf("the migration did not finish (%d differences): the carry-back is not tried", len(failing))
	}
	// The backup after the quiesce read from the stores only the bucket objects that changed
	// since the last round (none here): it copied the others from that round's backup. But for
	// the ledger, kept under the KMS's key: its ETag is not of its bytes, so it is read every time.
	_, final := readManifest(t, url, id)
	for _, b := range final.Buckets {
		var readAgain []string
		for _, o := range b.Objects {
			if o.ETag == "" {
				readAgain = append(readAgain, o.Key)
			}
		}
		t.Logf("bucket %s: %d objects, %d copied from %s, read again %q", b.Name, len(b.Objects), b.Reused, b.ReusedFrom, readAgain)
		want := map[string][]string{testbed.ZooBucket: {"records/ledger.csv"}}[b.Name]
		if b.Reused != len(b.Objects)-len(want) || !slices.Equal(readAgain, want) || !strings.HasPrefix(b.ReusedFrom, id+"-stage-") {
			t.Errorf("the backup after the quiesce copied %d of bucket %s's %d objects from %q and read %q again, want all from the last round's backup but %q",
				b.Reused, b.Name, len(b.Objects), b.ReusedFrom, readAgain, want)
		}
	}
	if len(final.Buckets) < 2 {
		t.Errorf("the run's backup holds %d buckets, want the platform's and the zoo's", len(final.Buckets))
	}

	// 3. Rollout history on green as on blue, and undo goes to the previous template.
	for _, r := range zoo.Rollouts {
		if got := rolloutHistory(t, green, r); !slices.Equal(got, blueHistory[r.Kind+"/"+r.Name]) {
			t.Errorf("kubectl rollout history %s/%s on green: %q, want blue's %q", r.Kind, r.Name, got, blueHistory[r.Kind+"/"+r.Name])
		}
	}
	for _, r := range zoo.Rollouts {
		if out, err := green.Kubectl(ctx, "-n", r.Namespace, "rollout", "undo", r.Kind+"/"+r.Name); err != nil {
			t.Errorf("kubectl rollout undo %s/%s on green: %v %s", r.Kind, r.Name, err, out)
			continue
		}
		waitUntil(t, fmt.Sprintf("%s/%s on green back at revision 2's template", r.Kind, r.Name), 60*time.Second, func(ctx context.Context) (bool, error) {
			return templateRelease(ctx, t, greenKC, r) == "2", nil
		})
	}

	// 4. Green takes writes: a row, a file, a bucket object, ConfigMaps, and work finishes there.
	if _, err := tb.MariaDB["green"].SQL(ctx, tb.Bins, "INSERT INTO "+testbed.ZooSchema+".items VALUES (1001, 'written on green', 1.50, NOW(), 1)"); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Postgres["green"].SQL(ctx, tb.Bins, testbed.ZooPGDB, "INSERT INTO shop.orders (user_id, total, meta) VALUES (7, 99.99, '{\"on\": \"green\"}');"+
		"INSERT INTO public.attachments VALUES (6, 7, lo_from_bytea(0, convert_to('attached on green', 'UTF8')))"); err != nil {
		t.Fatal(err)
	}
	greenFiles := claimFolder(t, greenKC, "zoo-apps", "odd-files")
	writeClaimFiles(t, greenFiles, map[string][]byte{"green/notes.txt": []byte("written on green\n")})
	if _, err := tb.MinIO["green"].S3Client().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(testbed.ZooBucket), Key: aws.String("green/after-cutover.json"),
		Body: bytes.NewReader([]byte(`{"on": "green"}`))}); err != nil {
		t.Fatal(err)
	}
	settings, err := greenKC.CoreV1().ConfigMaps("zoo-apps").Get(ctx, "settings", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	settings.Data = map[string]string{"mode": "green"}
	if _, err := greenKC.CoreV1().ConfigMaps("zoo-apps").Update(ctx, settings, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := greenKC.CoreV1().ConfigMaps("zoo-apps").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "made-on-green"},
		Data: map[string]string{"on": "green"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Green's release changes an immutable ConfigMap the only way there is: it makes it again.
	if err := greenKC.CoreV1().ConfigMaps("zoo-apps").Delete(ctx, "frozen", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := greenKC.CoreV1().ConfigMaps("zoo-apps").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "frozen"}, Immutable: ptr.To(true),
		Data: map[string]string{"release": "2026.12", "flags": "a,b,c,d"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// And it relabels the worker (its selector), binds the notebook's reader to another role and
	// gives the worker's priority another value: none of them changes but by being made again.
	remakeOnGreen(t, greenKC)

	// Work that finished on green is finished on blue after the carry-back: its status on blue
	// still says queued or running, and blue's controllers would run it again after a rollback.
	if err := green.FinishTrainJob(ctx, "queued"); err != nil {
		t.Fatal(err)
	}
	if err := green.FinishWorkflow(ctx, "hourly-etl"); err != nil {
		t.Fatal(err)
	}

	// 5. The carry-back: blue then equals green.
	start = time.Now()
	code, out, errOut = runFerry(t, "--kubeconfig", kubeconfig, "--storage", url, "rollback", "--run", id, "--carry-back", "--lease-ttl", testLeaseTTL.String())
	logResets("ferry rollback --carry-back")
	if code != 0 {
		t.Errorf("ferry rollback --carry-back exited %d after %s, want 0\nstdout: %s\nstderr (end): %s", code, time.Since(start).Round(time.Second), out, lastLines(errOut, 30))
	} else {
		rolledBack = true
		t.Logf("ferry rollback --carry-back took %s", time.Since(start).Round(100*time.Millisecond))
	}
	requireSame(t, "after ferry rollback --carry-back", blueSide, greenSide, scope)
	for _, r := range zoo.Rollouts {
		if got := templateRelease(ctx, t, blueKC, r); got != "2" {
			t.Errorf("%s/%s on blue after the carry-back runs release %q, want green's undone template (2)", r.Kind, r.Name, got)
		}
	}
	if rows, err := tb.MariaDB["blue"].SQL(ctx, tb.Bins, "SELECT name FROM "+testbed.ZooSchema+".items WHERE id = 1001"); err != nil || strings.TrimSpace(rows) != "written on green" {
		t.Errorf("green's row on blue after the carry-back: %q (%v)", rows, err)
	}
}

// wantHistory is kubectl rollout history's lines for revisions with these change-causes.
func wantHistory(causes []string) []string {
	var out []string
	for i, c := range causes {
		out = append(out, fmt.Sprintf("%d %s", i+1, c))
	}
	return out
}

// rolloutHistory runs kubectl rollout history and returns its revisions as "N change-cause".
func rolloutHistory(t *testing.T, c *testbed.Cluster, r testbed.ZooRollout) []string {
	t.Helper()
	out, err := c.Kubectl(context.Background(), "-n", r.Namespace, "rollout", "history", r.Kind+"/"+r.Name)
	if err != nil {
		t.Errorf("%v", err)
		return nil
	}
	var revs []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] == "REVISION" || strings.Contains(f[0], "/") {
			continue
		}
		revs = append(revs, strings.Join(f, " "))
	}
	return revs
}

// templateRelease is the RELEASE variable of a workload's pod template: which revision it runs.
func templateRelease(ctx context.Context, t *testing.T, kc kubernetes.Interface, r testbed.ZooRollout) string {
	t.Helper()
	var spec corev1.PodSpec
	switch r.Kind {
	case "deployment":
		d, err := kc.AppsV1().Deployments(r.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		spec = d.Spec.Template.Spec
	case "daemonset":
		d, err := kc.AppsV1().DaemonSets(r.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		spec = d.Spec.Template.Spec
	default:
		s, err := kc.AppsV1().StatefulSets(r.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		spec = s.Spec.Template.Spec
	}
	for _, c := range spec.Containers {
		for _, e := range c.Env {
			if e.Name == "RELEASE" {
				return e.Value
			}
		}
	}
	return ""
}

// lastLines is the end of a command's output.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// remakeOnGreen makes green's zoo-apps/worker again with another selector, the RoleBinding
// zoo-team/default-notebook-reader with another role, the PriorityClass zoo-critical with
// another value and the Service zoo-apps/cache no longer headless, as a new release does: the API server refuses each change in place. (Not the
// notebook: zoo-team's quota, lowered below what it holds, refuses a Deployment made there.)
func remakeOnGreen(t *testing.T, kc kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	fresh := func(m *metav1.ObjectMeta) {
		*m = metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, Labels: m.Labels, Annotations: m.Annotations}
	}
	deployments := kc.AppsV1().Deployments("zoo-apps")
	d, err := deployments.Get(ctx, "worker", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fresh(&d.ObjectMeta)
	d.Status = appsv1.DeploymentStatus{}
	d.Spec.Selector.MatchLabels["component"] = "server"
	d.Spec.Template.Labels["component"] = "server"
	bindings := kc.RbacV1().RoleBindings("zoo-team")
	rb, err := bindings.Get(ctx, "default-notebook-reader", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fresh(&rb.ObjectMeta)
	rb.RoleRef = rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"}
	classes := kc.SchedulingV1().PriorityClasses()
	pc, err := classes.Get(ctx, "zoo-critical", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fresh(&pc.ObjectMeta)
	pc.Value *= 2
	services := kc.CoreV1().Services("zoo-apps")
	svc, err := services.Get(ctx, "cache", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fresh(&svc.ObjectMeta)
	svc.Spec.ClusterIP, svc.Spec.ClusterIPs = "", nil // no longer headless
	foreground := metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)}
	for _, step := range []func() error{
		func() error { return deployments.Delete(ctx, d.Name, foreground) },
		func() error { return bindings.Delete(ctx, rb.Name, metav1.DeleteOptions{}) },
		func() error { return classes.Delete(ctx, pc.Name, metav1.DeleteOptions{}) },
		func() error { return services.Delete(ctx, svc.Name, metav1.DeleteOptions{}) },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "green's worker Deployment gone", 2*time.Minute, func(ctx context.Context) (bool, error) {
		_, err := deployments.Get(ctx, d.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	for _, step := range []func() error{
		func() error { _, err := deployments.Create(ctx, d, metav1.CreateOptions{}); return err },
		func() error { _, err := bindings.Create(ctx, rb, metav1.CreateOptions{}); return err },
		func() error { _, err := classes.Create(ctx, pc, metav1.CreateOptions{}); return err },
		func() error { _, err := services.Create(ctx, svc, metav1.CreateOptions{}); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
}

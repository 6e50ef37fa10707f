package integration

import (
	"context"
	"fmt"
	"io"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/migrate"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/plans/config"
	"github.com/ferrykube/ferry/snapshot"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// createNamespace makes a namespace with labels, if missing, and deletes it after the test: other
// tests back up all of blue and must not meet this one's shapes.
func createNamespace(t *testing.T, kc kubernetes.Interface, name string, labels map[string]string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if _, err := kc.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	removeAfter(t, name, kc)
}

// claimTemplateSet creates a one-replica StatefulSet whose pods (app=name) keep their data on the
// claim template "data", as database charts do; binds its claim data-NAME-0 to a folder of the
// testbed and returns the running pod's name (NAME-0).
func claimTemplateSet(t *testing.T, ns, name string, edits ...func(*appsv1.StatefulSet)) string {
	t.Helper()
	blue, kc := clients(t, "blue")
	ctx := context.Background()
	labels := map[string]string{"app": name}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](1), ServiceName: name,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: name, Image: name,
					VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/var/lib/data"}}}}}},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: "data"},
				Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: ptr.To("gp3"),
					Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
			}},
		},
	}
	for _, edit := range edits {
		edit(sts)
	}
	if _, err := kc.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	claim := "data-" + name + "-0"
	waitUntil(t, "claim "+claim+" made by the StatefulSet", time.Minute, func(ctx context.Context) (bool, error) {
		_, err := kc.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim, metav1.GetOptions{})
		return err == nil, nil
	})
	if err := blue.BindClaim(ctx, ns, claim, dataDir(t, ns+"-"+claim)); err != nil {
		t.Fatal(err)
	}
	return runningPod(t, kc, ns, "app="+name)
}

// TestQuiesceKeepsTheClaimsAStatefulSetDeletesWhenScaledDown: a StatefulSet whose claims go
// when it scales down (persistentVolumeClaimRetentionPolicy whenScaled: Delete, as charts set it
// for caches and queues) writes to a claim whose files move, so a migration scales it to zero;
// the StatefulSet controller then deleted blue's claim, blue's copy of the data, before the backup
// read it, and the rollback target started with none. While ferry holds it at zero, it keeps its
// claims (Retain); started again, on green and on blue, it deletes them as before.
func TestQuiesceKeepsTheClaimsAStatefulSetDeletesWhenScaledDown(t *testing.T) {
	const ns, claim = "shapes-scaled-claims", "data-ledger-0"
	blueKC, greenKC := cutoverShapesNamespace(t, ns)
	ctx := context.Background()
	claimTemplateSet(t, ns, "ledger", func(sts *appsv1.StatefulSet) {
		sts.Spec.PersistentVolumeClaimRetentionPolicy = &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
			WhenScaled: appsv1.DeletePersistentVolumeClaimRetentionPolicyType, WhenDeleted: appsv1.RetainPersistentVolumeClaimRetentionPolicyType}
	})
	if err := os.WriteFile(filepath.Join(claimFolder(t, blueKC, ns, claim), "entries.log"), []byte("entry 1\nentry 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	policy := func(kc kubernetes.Interface) (int32, string) {
		sts, err := kc.AppsV1().StatefulSets(ns).Get(ctx, "ledger", metav1.GetOptions{})
		if err != nil || sts.Spec.PersistentVolumeClaimRetentionPolicy == nil {
			t.Fatalf("StatefulSet %s/ledger: %v", ns, err)
		}
		return *sts.Spec.Replicas, string(sts.Spec.PersistentVolumeClaimRetentionPolicy.WhenScaled)
	}
	claimKept := func(kc kubernetes.Interface, cluster string) {
		t.Helper()
		pvc, err := kc.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim, metav1.GetOptions{})
		if err != nil || pvc.DeletionTimestamp != nil {
			t.Fatalf("%s's claim %s/%s after the run: %v (deleting since %v); want it kept", cluster, ns, claim, err, pvc.DeletionTimestamp)
		}
	}

	config := gp3Config(t, ns)
	store := "file://" + filepath.Join(t.TempDir(), "store")
	code, out, errOut := runFerry(t, "--storage", store, "migrate", "--from", "blue", "--to", "cutover", "-f", config, "--lease-ttl", testLeaseTTL.String())
	time.Sleep(2 * time.Second) // what the garbage collector deletes, it has deleted by now
	claimKept(blueKC, "blue")
	if code != 0 || !strings.Contains(out, "shifted") {
		t.Fatalf("ferry migrate exited %d, want 0 and shifted\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if replicas, whenScaled := policy(blueKC); replicas != 0 || whenScaled != "Retain" {
		t.Errorf("blue's ledger while stopped: %d replicas, whenScaled %s; want 0 and Retain", replicas, whenScaled)
	}
	claimKept(greenKC, "green")
	if got := claimFiles(t, claimFolder(t, greenKC, ns, claim)); got["entries.log"] == "" {
		t.Errorf("green's claim holds %v, want entries.log", got)
	}
	if replicas, whenScaled := policy(greenKC); replicas != 1 || whenScaled != "Delete" {
		t.Errorf("green's ledger: %d replicas, whenScaled %s; want 1 and Delete, as blue's ran", replicas, whenScaled)
	}

	code, out, errOut = runFerry(t, "--storage", store, "rollback", "--run", runID(t, errOut), "--discard-green-writes")
	if code != 0 {
		t.Fatalf("ferry rollback exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if replicas, whenScaled := policy(blueKC); replicas != 1 || whenScaled != "Delete" {
		t.Errorf("blue's ledger after the rollback: %d replicas, whenScaled %s; want 1 and Delete", replicas, whenScaled)
	}
	claimKept(blueKC, "blue")
	if got := claimFiles(t, claimFolder(t, blueKC, ns, claim)); got["entries.log"] == "" {
		t.Errorf("blue's claim after the rollback holds %v, want entries.log", got)
	}
}

// TestStatefulSetDatabasesMoveAsDumps: a MariaDB and a PostgreSQL run by StatefulSets keep their
// data on claim templates (data-<sts>-0). Those claims move as the databases (the plan says so, no
// mover copies their files), the StatefulSets are not among the writers a migration scales to
// zero, and the backup dumps both.
func TestStatefulSetDatabasesMoveAsDumps(t *testing.T) {
	blue, kc := clients(t, "blue")
	ctx := context.Background()
	const ns = "shapes-db"
	db, pg := tb.MariaDB["blue"], tb.Postgres["blue"]
	t.Cleanup(func() {
		db.SQL(context.Background(), tb.Bins, "DROP DATABASE IF EXISTS shapes_app")
		pg.SQL(context.Background(), tb.Bins, "postgres", "DROP DATABASE IF EXISTS shapes_pg WITH (FORCE)")
	})
	createNamespace(t, kc, ns, nil)
	for name, data := range map[string]map[string]string{
		"mariadb-creds": {"username": db.User, "password": db.Password},
		"pg-creds":      {"user": pg.User, "password": pg.Password},
	} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, StringData: data}
		if _, err := kc.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pod := claimTemplateSet(t, ns, "mariadb")
	if err := blue.MapExec(ctx, ns, pod, db.ClientHome, db.Env()); err != nil {
		t.Fatal(err)
	}
	pod = claimTemplateSet(t, ns, "postgres")
	env := pg.Env()
	delete(env, "PGPASSWORD") // ferry hands the Secret's password over itself
	if err := blue.MapExec(ctx, ns, pod, dataDir(t, "shapes-pg"), env); err != nil {
		t.Fatal(err)
	}
	if _, err := db.SQL(ctx, tb.Bins, `DROP DATABASE IF EXISTS shapes_app; CREATE DATABASE shapes_app;
CREATE TABLE shapes_app.orders (id INT PRIMARY KEY, item VARCHAR(32));
INSERT INTO shapes_app.orders VALUES (1, 'kettle'), (2, 'lamp'), (3, 'rug');`); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{"DROP DATABASE IF EXISTS shapes_pg WITH (FORCE)", "CREATE DATABASE shapes_pg"} {
		if _, err := pg.SQL(ctx, tb.Bins, "postgres", stmt); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pg.SQL(ctx, tb.Bins, "shapes_pg", `CREATE TABLE accounts (id int PRIMARY KEY, name text);
INSERT INTO accounts SELECT g, 'acct-' || g FROM generate_series(1, 40) g;`); err != nil {
		t.Fatal(err)
	}
	configFile := filepath.Join(t.TempDir(), "ferry.yaml")
	if err := os.WriteFile(configFile, []byte(`include: {namespaces: [`+ns+`]}
databases:
- name: shop-mariadb
  engine: mysql
  namespace: `+ns+`
  workload: statefulset/mariadb
  secret: {name: mariadb-creds, userKey: username, passwordKey: password}
  schemas: [shapes_app]
- name: shop-pg
  engine: postgresql
  namespace: `+ns+`
  workload: statefulset/postgres
  secret: {name: pg-creds, userKey: user, passwordKey: password}
  schemas: [shapes_pg]
`), 0o644); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := runFerry(t, "plan", "--from", "blue", "-f", configFile)
	if code != 0 {
		t.Fatalf("ferry plan exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	for _, want := range []string{ns + "/data-mariadb-0 (moves as database shop-mariadb)", ns + "/data-postgres-0 (moves as database shop-pg)"} {
		if !strings.Contains(out, want) {
			t.Errorf("ferry plan does not show %q:\n%s", want, out)
		}
	}

	// The writers a migration of this plan would scale to zero (migrate's quiesce step).
	cfg, err := config.LoadConfig(configFile, "")
	if err != nil {
		t.Fatal(err)
	}
	source, dyn, _ := planClients(t, "blue")
	plan, err := plans.Inventory(ctx, source, plans.Options{Config: cfg.Merge(testbedConfig(t)).Planning, Context: "blue"})
	if err != nil {
		t.Fatal(err)
	}
	rules, err := migrate.WriterRules(ctx, dyn, plan)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rules {
		if r.Resource == "statefulsets.apps" && r.Namespace == ns {
			t.Errorf("a migration would scale the databases' StatefulSets %v to zero (%s)", r.Names, r.Why)
		}
	}
	for _, v := range plan.Volumes {
		if want := map[string]string{"data-mariadb-0": "database shop-mariadb", "data-postgres-0": "database shop-pg"}[v.Name]; v.Holds != want {
			t.Errorf("claim %s/%s moves as %q, want %q", v.Namespace, v.Name, v.Holds, want)
		}
	}

	storeDir := t.TempDir()
	code, out, errOut = runFerry(t, "--storage", "file://"+storeDir, "backup", "--from", "blue", "-f", configFile, "--name", "sts-dbs")
	if code != 0 {
		t.Fatalf("ferry backup exited %d (want 0: both databases dumped, no claim to copy)\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	_, m := readManifest(t, "file://"+storeDir, "sts-dbs")
	for _, v := range m.Volumes {
		t.Errorf("claim %s/%s was copied as files; it moves as its database", v.Namespace, v.Name)
	}
	want := map[string]int64{"shop-mariadb shapes_app.orders": 3, "shop-pg shapes_pg.public.accounts": 40}
	for _, d := range m.Databases {
		for _, tbl := range d.Tables {
			key := d.Name + " " + tbl.Schema + "." + tbl.Name
			if n, ok := want[key]; !ok || n != tbl.Rows {
				t.Errorf("dumped %s with %d rows; want %v", key, tbl.Rows, want)
			}
			delete(want, key)
		}
	}
	if len(want) > 0 {
		t.Errorf("not dumped: %v (databases in the manifest: %+v)", want, m.Databases)
	}
	if sts, err := kc.AppsV1().StatefulSets(ns).Get(ctx, "mariadb", metav1.GetOptions{}); err != nil || *sts.Spec.Replicas != 1 {
		t.Errorf("the database's StatefulSet after the backup: %v, %v", sts, err)
	}
}

// quotaNamespace makes a namespace on blue whose ResourceQuota counts cpu and memory (so every
// pod must set them) and whose LimitRange bounds each pod, with a Deployment whose pod mounts a
// claim bound to a folder holding files; it returns that folder.
func quotaNamespace(t *testing.T, ns string, quota corev1.ResourceList, ranges []corev1.LimitRangeItem) string {
	t.Helper()
	blue, kc := clients(t, "blue")
	ctx := context.Background()
	createNamespace(t, kc, ns, nil)
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "team-quota"}, Spec: corev1.ResourceQuotaSpec{Hard: quota}}
	if _, err := kc.CoreV1().ResourceQuotas(ns).Create(ctx, q, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if ranges != nil {
		lr := &corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Name: "bounds"}, Spec: corev1.LimitRangeSpec{Limits: ranges}}
		if _, err := kc.CoreV1().LimitRanges(ns).Create(ctx, lr, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	dir := dataDir(t, ns+"-files")
	writeClaimFiles(t, dir, map[string][]byte{"model/weights.bin": []byte(strings.Repeat("w", 4096)), "notes.txt": []byte("quota'd namespace\n")})
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "files"},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: ptr.To("gp3"),
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	if _, err := kc.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := blue.BindClaim(ctx, ns, "files", dir); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "notebook"}
	res := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("256Mi")}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "notebook"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "notebook", Image: "notebook", Resources: corev1.ResourceRequirements{Requests: res, Limits: res},
						VolumeMounts: []corev1.VolumeMount{{Name: "files", MountPath: "/home"}}}},
					Volumes: []corev1.Volume{{Name: "files", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "files"}}}},
				}},
		},
	}
	if _, err := kc.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	runningPod(t, kc, ns, "app=notebook")
	return dir
}

// TestMoversInQuotaNamespaces: in a namespace whose quota counts cpu and memory (a Kubeflow
// Profile's resourceQuotaSpec) and whose LimitRange bounds pods, a backup and a restore of its
// claim succeed: the mover pods set requests and limits within the range. A namespace whose quota
// has no room for a mover gets a blocking finding naming the quota and what is short, from ferry
// plan, ferry backup and ferry restore, and nothing runs.
func TestMoversInQuotaNamespaces(t *testing.T) {
	_, kc := clients(t, "blue")
	ctx := context.Background()
	const ns, full = "shapes-quota", "shapes-quota-full"
	quota := corev1.ResourceList{
		"requests.cpu": resource.MustParse("2"), "requests.memory": resource.MustParse("2Gi"),
		"limits.cpu": resource.MustParse("4"), "limits.memory": resource.MustParse("4Gi"), "pods": resource.MustParse("10"),
	}
	// Pod bounds only: the API gives a Pod range no defaults for containers, so a pod that sets
	// nothing is refused by the quota, and ferry's default limit of memory (512Mi) is above max.
	ranges := []corev1.LimitRangeItem{{Type: corev1.LimitTypePod,
		Min: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
		Max: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("384Mi")}}}
	dir := quotaNamespace(t, ns, quota, ranges)
	quotaNamespace(t, full, corev1.ResourceList{"requests.cpu": resource.MustParse("2"), "requests.memory": resource.MustParse("2Gi"),
		"limits.cpu": resource.MustParse("4"), "limits.memory": resource.MustParse("4Gi"), "pods": resource.MustParse("1")}, nil)
	waitUntil(t, "the quota of "+full+" counting its pod", time.Minute, func(ctx context.Context) (bool, error) {
		q, err := kc.CoreV1().ResourceQuotas(full).Get(ctx, "team-quota", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		used := q.Status.Used[corev1.ResourcePods]
		return used.Value() == 1, nil
	})

	write := func(namespaces ...string) string {
		configFile := namespacesConfig(t, namespaces...)
		return configFile
	}

	// No room: plan and backup stop on a finding naming the quota and the pods it lacks.
	storeDir := t.TempDir()
	code, out, errOut := runFerry(t, "plan", "--from", "blue", "-f", write(full))
	wantFinding := "resourcequota " + full + "/team-quota"
	if code != 3 || !regexpLine(out, `blocking\s+`+wantFinding+`\s+on the source, 1 mover pod would need pods 1 but only 0 is left \(hard 1, used 1\)`) {
		t.Errorf("ferry plan exited %d, want 3 and a blocking finding for %s\nstdout: %s\nstderr: %s", code, wantFinding, out, errOut)
	}
	code, out, errOut = runFerry(t, "--storage", "file://"+storeDir, "backup", "--from", "blue", "-f", write(full), "--name", "no-room")
	if code != 3 || !strings.Contains(out, wantFinding+": on the source, 1 mover pod would need pods 1 but only 0 is left") {
		t.Errorf("ferry backup exited %d, want 3 and the blocking finding for %s\nstdout: %s\nstderr: %s", code, wantFinding, out, errOut)
	}
	if got := listBackups(t, "file://"+storeDir); len(got) > 0 {
		t.Errorf("ferry backup wrote %v though preflight blocked it", got)
	}
	if pods, err := kc.CoreV1().Pods(full).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=ferry-mover"}); err != nil || len(pods.Items) > 0 {
		t.Errorf("mover pods in %s: %v, %v; want none", full, pods, err)
	}

	// Room: the backup and the restore of the claim succeed through the quota and the range.
	code, out, errOut = runFerry(t, "--storage", "file://"+storeDir, "backup", "--from", "blue", "-f", write(ns), "--name", "quota")
	if code != 0 {
		t.Fatalf("ferry backup exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	_, m := readManifest(t, "file://"+storeDir, "quota")
	if i := slices.IndexFunc(m.Volumes, func(v snapshot.Volume) bool { return v.Namespace == ns && v.Name == "files" }); i < 0 || m.Volumes[i].List.Entries < 2 {
		t.Fatalf("the backup lacks claim %s/files or its files: %+v", ns, m.Volumes)
	}
	green, greenKC := clients(t, "green")
	removeAfter(t, ns, greenKC)
	if err := green.Apply(ctx, io.Discard, filepath.Join(repoDir(), "integration", "testdata", "standard-storageclass.yaml")); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runFerry(t, "--storage", "file://"+storeDir, "restore", "--to", "green", "--backup", "quota", "--storage-class-map", "gp3=standard")
	if code != 0 {
		t.Fatalf("ferry restore exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	pvc, err := greenKC.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "files", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv, err := greenKC.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil || pv.Spec.HostPath == nil {
		t.Fatalf("green's volume of %s/files: %v, %v", ns, pv, err)
	}
	if got, want := claimFiles(t, pv.Spec.HostPath.Path), claimFiles(t, dir); !equalMaps(got, want) {
		t.Errorf("green's claim holds %v, blue's %v", got, want)
	}

	// No room on the target: green's copy of the namespace gets its quota filled; a restore stops.
	full2 := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "tight"}, Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"limits.memory": resource.MustParse("100Mi")}}}
	if _, err := greenKC.CoreV1().ResourceQuotas(ns).Create(ctx, full2, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runFerry(t, "--storage", "file://"+storeDir, "restore", "--to", "green", "--backup", "quota", "--storage-class-map", "gp3=standard")
	if code != 3 || !strings.Contains(out, "resourcequota "+ns+"/tight: on the target, 1 mover pod would need limits.memory 384Mi but only ") {
		t.Errorf("ferry restore onto a full quota exited %d, want 3 and a blocking finding\nstdout: %s\nstderr: %s", code, out, errOut)
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestEveryWriterOfAMovedClaimIsStopped: the writers a migration stops were the Deployments and
// StatefulSets whose pods mount a claim whose files move. Other pods write to claims too: a
// ReplicaSet's of no Deployment, a Job's (a training run, an export; kwok ends a Job's pods at
// once, so unit tests show those), a pod run by hand (a toolbox) or by an operator (a database's
// instance). They ran on through the migration, which said it was done: what they wrote while the
// movers read, and after, never reached green. Now a ReplicaSet is scaled to zero as the others
// are; a writer no rule stops (here the pod run by hand) stops the run before anything is
// stopped, naming it, until it ends or a rule stops it; so does one on green a carry-back meets.
func TestEveryWriterOfAMovedClaimIsStopped(t *testing.T) {
	const ns = "shapes-writers"
	blueKC, greenKC := cutoverShapesNamespace(t, ns)
	ctx := context.Background()
	gp3 := func(s *corev1.PersistentVolumeClaimSpec) { s.StorageClassName = ptr.To("gp3") }
	for _, claim := range []string{"cache-data", "notes-data"} {
		blueClaim(t, ns, claim, map[string][]byte{"written.txt": []byte("by " + claim + "\n")}, gp3)
	}
	podSpec := func(claim string) corev1.PodSpec {
		return corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "w", Image: "writer",
			VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}}
	}
	cacheSpec := podSpec("cache-data")
	cacheSpec.RestartPolicy = corev1.RestartPolicyAlways
	cache := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "cache"}, Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](1),
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "cache"}},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "cache"}}, Spec: cacheSpec}}}
	if _, err := blueKC.AppsV1().ReplicaSets(ns).Create(ctx, cache, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	toolbox := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "toolbox", Labels: map[string]string{"app": "toolbox"}}, Spec: podSpec("notes-data")}
	if _, err := blueKC.CoreV1().Pods(ns).Create(ctx, toolbox, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	runningPod(t, blueKC, ns, "app=cache")
	runningPod(t, blueKC, ns, "app=toolbox")
	stopped := func(kc kubernetes.Interface, cluster string, want bool) {
		t.Helper()
		rs, err := kc.AppsV1().ReplicaSets(ns).Get(ctx, "cache", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%s's ReplicaSet %s/cache: %v", cluster, ns, err)
		}
		if (*rs.Spec.Replicas == 0) != want {
			t.Errorf("%s's ReplicaSet cache has %d replicas; want it stopped: %v", cluster, *rs.Spec.Replicas, want)
		}
	}

	config := gp3Config(t, ns)
	store := "file://" + filepath.Join(t.TempDir(), "store")
	code, out, errOut := runFerry(t, "--storage", store, "migrate", "--from", "blue", "--to", "cutover", "-f", config, "--lease-ttl", testLeaseTTL.String())
	if code == 0 || !strings.Contains(errOut, "pod "+ns+"/toolbox") || !strings.Contains(errOut, "notes-data") {
		t.Fatalf("ferry migrate with a writer no rule stops (pod toolbox on claim notes-data) exited %d, want it stopped naming them\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	stopped(blueKC, "blue", false) // nothing was stopped
	t.Logf("ferry migrate exited %d: %s", code, errOut[strings.LastIndex(strings.TrimSpace(errOut), "\n")+1:])
	id := runID(t, errOut)

	if err := blueKC.CoreV1().Pods(ns).Delete(ctx, "toolbox", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "pod toolbox gone", time.Minute, func(ctx context.Context) (bool, error) {
		_, err := blueKC.CoreV1().Pods(ns).Get(ctx, "toolbox", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	code, out, errOut = runFerry(t, "--storage", store, "migrate", "--resume", id, "--lease-ttl", testLeaseTTL.String())
	if code != 0 || !strings.Contains(out, "shifted") {
		t.Fatalf("ferry migrate --resume (the toolbox ended) exited %d, want 0 and shifted\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	stopped(blueKC, "blue", true)
	pods, err := blueKC.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			t.Errorf("blue's pod %s still runs after the migration", p.Name)
		}
	}
	stopped(greenKC, "green", false)
	for _, claim := range []string{"cache-data", "notes-data"} {
		if got := claimFiles(t, claimFolder(t, greenKC, ns, claim)); got["written.txt"] == "" {
			t.Errorf("green's claim %s holds %v, want written.txt", claim, got)
		}
	}

	// Going back carries green's writes to blue: a pod run by hand on green writing to a claim
	// stops the carry-back as the toolbox stopped the migration.
	scratchpad := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "scratchpad", Labels: map[string]string{"app": "scratchpad"}}, Spec: podSpec("notes-data")}
	if _, err := greenKC.CoreV1().Pods(ns).Create(ctx, scratchpad, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	runningPod(t, greenKC, ns, "app=scratchpad")
	code, out, errOut = runFerry(t, "--storage", store, "rollback", "--run", id, "--carry-back")
	if code == 0 || !strings.Contains(errOut, "pod "+ns+"/scratchpad (run by hand) writes to claim notes-data") {
		t.Fatalf("ferry rollback --carry-back with a writer on green no rule stops exited %d, want it stopped naming it\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	stopped(greenKC, "green", false) // nothing was stopped
	if err := greenKC.CoreV1().Pods(ns).Delete(ctx, "scratchpad", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "pod scratchpad gone", time.Minute, func(ctx context.Context) (bool, error) {
		_, err := greenKC.CoreV1().Pods(ns).Get(ctx, "scratchpad", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	code, out, errOut = runFerry(t, "--storage", store, "rollback", "--run", id, "--carry-back")
	if code != 0 {
		t.Fatalf("ferry rollback --carry-back (the scratchpad ended) exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	stopped(blueKC, "blue", false)
}

// TestTheDefaultNamespacesSettingsMove: the default namespace exists on every cluster, so its
// Namespace object never moved, and with it went the settings someone gave it: a mesh's injection
// (istio-injection, linkerd.io/inject), Pod Security's levels, the labels network policies select
// namespaces by. Green then ran the same workloads outside the mesh, and verify passed. Now they
// are added to the target's default namespace, and verify compares them.
func TestTheDefaultNamespacesSettingsMove(t *testing.T) {
	_, greenKC := clients(t, "green")
	ctx := context.Background()
	labels := []string{"istio-injection=enabled", "pod-security.kubernetes.io/warn=baseline"}
	kubectl(t, "blue", "", append([]string{"label", "namespace", "default"}, labels...)...)
	kubectl(t, "blue", "", "annotate", "namespace", "default", "linkerd.io/inject=enabled")
	t.Cleanup(func() {
		for _, cluster := range []string{"blue", "green"} {
			kubectl(t, cluster, "", "label", "namespace", "default", "istio-injection-", "pod-security.kubernetes.io/warn-")
			kubectl(t, cluster, "", "annotate", "namespace", "default", "linkerd.io/inject-")
		}
	})
	store := "file://" + filepath.Join(t.TempDir(), "store")
	if code, out, errOut := runFerry(t, "--storage", store, "backup", "--from", "blue", "-f", namespacesConfig(t, "default"), "--name", "defaults"); code != 0 {
		t.Fatalf("ferry backup exited %d\n%s\n%s", code, out, errOut)
	}
	if code, out, errOut := runFerry(t, "--storage", store, "restore", "--to", "green", "--backup", "defaults"); code != 0 {
		t.Fatalf("ferry restore exited %d\n%s\n%s", code, out, errOut)
	}
	ns, err := greenKC.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ns.Labels["istio-injection"] != "enabled" || ns.Labels["pod-security.kubernetes.io/warn"] != "baseline" || ns.Annotations["linkerd.io/inject"] != "enabled" {
		t.Fatalf("green's default namespace after the restore: labels %v, annotations %v; want blue's istio-injection, Pod Security and linkerd settings", ns.Labels, ns.Annotations)
	}
	if code, out, errOut := runFerry(t, "--storage", store, "verify", "--to", "green", "--backup", "defaults"); code != 0 {
		t.Fatalf("ferry verify exited %d\n%s\n%s", code, out, errOut)
	}
	kubectl(t, "green", "", "label", "namespace", "default", "istio-injection=disabled", "--overwrite")
	if code, out, errOut := runFerry(t, "--storage", store, "verify", "--to", "green", "--backup", "defaults"); code != 3 || !strings.Contains(out+errOut, "istio-injection") {
		t.Errorf("ferry verify of green's default namespace out of the mesh exited %d, want 3 naming istio-injection\n%s\n%s", code, out, errOut)
	}
}

// TestServerSideAppliedObjectsKeepTheirManagers: objects a GitOps tool or Helm 4 writes by
// server-side apply are owned, field by field, by its field manager, and its next apply removes
// what its configuration no longer holds and changes what it does. A restore made every field
// ferry's: on green the next apply left the removed key in place and refused the change, as a
// conflict with "ferry". Now the restore gives the objects the backup's managers: the same apply
// does on green what it does on blue.
func TestServerSideAppliedObjectsKeepTheirManagers(t *testing.T) {
	const ns = "shapes-ssa"
	blueKC, greenKC := restoreShapesNamespace(t, ns)
	settings := func(data string) string {
		return "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: " + ns + "}\ndata: {" + data + "}\n"
	}
	kubectl(t, "blue", settings("mode: fast, retries: \"3\""), "apply", "--server-side", "--field-manager", "gitops", "-f", "-")
	moveNamespace(t, ns, "ssa")

	// The repository now drops retries and changes mode; the tool applies it to both clusters.
	for _, c := range []struct {
		name string
		kc   kubernetes.Interface
	}{{"blue", blueKC}, {"green", greenKC}} {
		cmd := exec.Command(tb.Bins["kubectl"], "--kubeconfig", tb.Kubeconfig, "--context", c.name, "apply", "--server-side", "--field-manager", "gitops", "-f", "-")
		cmd.Stdin = strings.NewReader(settings("mode: safe"))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("the GitOps tool's next apply on %s: %v\n%s", c.name, err, out)
			continue
		}
		cm, err := c.kc.CoreV1().ConfigMaps(ns).Get(context.Background(), "settings", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(cm.Data) != 1 || cm.Data["mode"] != "safe" {
			t.Errorf("%s's ConfigMap after the GitOps tool's next apply holds %v, want only mode: safe", c.name, cm.Data)
		}
	}
}

// TestMeshRootCertificatesStayEachClusters: Istio's control plane writes its mesh's root
// certificate into every namespace (ConfigMap istio-ca-root-cert), as the API server does its own
// (kube-root-ca.crt); Kubeflow's tenants run in the mesh. Green's istiod had written green's into
// the tenant's namespace as it was made: the restore found it differing and skipped it (exit 3,
// which stops a migration), and with --existing update would have put blue's root in place of
// green's, breaking the mesh's trust there. Now each cluster's stays its own.
func TestMeshRootCertificatesStayEachClusters(t *testing.T) {
	_, blueKC := clients(t, "blue")
	_, greenKC := clients(t, "green")
	ctx := context.Background()
	const ns = "shapes-mesh"
	createNamespace(t, blueKC, ns, map[string]string{"istio-injection": "enabled"})
	createNamespace(t, greenKC, ns, map[string]string{"istio-injection": "enabled"})
	root := func(cluster string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "istio-ca-root-cert", Labels: map[string]string{"istio.io/config": "true"}},
			Data: map[string]string{"root-cert.pem": "-----BEGIN CERTIFICATE-----\n" + cluster + "'s mesh root\n-----END CERTIFICATE-----\n"}}
	}
	for kc, cm := range map[kubernetes.Interface]*corev1.ConfigMap{blueKC: root("blue"), greenKC: root("green")} {
		if _, err := kc.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	settings := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"}, Data: map[string]string{"mode": "fast"}}
	if _, err := blueKC.CoreV1().ConfigMaps(ns).Create(ctx, settings, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	store := moveNamespace(t, ns, "mesh")
	if code, out, errOut := runFerry(t, "--storage", store, "verify", "--to", "green", "--backup", "mesh"); code != 0 {
		t.Errorf("ferry verify exited %d\n%s\n%s", code, out, errOut)
	}
	if code, out, errOut := runFerry(t, "--storage", store, "restore", "--to", "green", "--backup", "mesh", "--existing", "update"); code != 0 {
		t.Errorf("ferry restore --existing update exited %d\n%s\n%s", code, out, errOut)
	}
	cm, err := greenKC.CoreV1().ConfigMaps(ns).Get(ctx, "istio-ca-root-cert", metav1.GetOptions{})
	if err != nil || !strings.Contains(cm.Data["root-cert.pem"], "green's mesh root") {
		t.Errorf("green's mesh root certificate after the restores: %v (%v), want green's own", cm.Data, err)
	}
	if _, err := greenKC.CoreV1().ConfigMaps(ns).Get(ctx, "settings", metav1.GetOptions{}); err != nil {
		t.Errorf("the tenant's own ConfigMap on green: %v", err)
	}
}

// TestWebhooksGoWithTheirServers: admission webhook configurations are cluster-scoped, so they
// moved whatever the selection: a migration of a few tenants' namespaces took the policy engine's
// webhook, whose server stays behind, and green then refused what it matches (failurePolicy
// Fail: "service not found"), with the restore and verify at exit 0. Now a webhook goes with its
// server's namespace, as a volume goes with its claim's; the plan says why it stays.
func TestWebhooksGoWithTheirServers(t *testing.T) {
	ctx := context.Background()
	const ns = "shapes-hooked"
	_, greenKC := restoreShapesNamespace(t, ns)
	hook := func(name, serverNS, label string) string {
		return `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: ` + name + `}
webhooks:
- name: ` + name + `.shapes.example.com
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: Fail
  clientConfig: {service: {namespace: ` + serverNS + `, name: guard, path: /validate}}
  objectSelector: {matchLabels: {` + label + `: "true"}}
  rules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}]
`
	}
	// The policy engine's, served from a namespace that stays; the tenant's own, served from its namespace.
	manifests := hook("shapes-policy-guard", "shapes-policy-engine", "shapes-policed") + "---\n" + hook("shapes-tenant-guard", ns, "shapes-tenant-checked")
	kubectl(t, "blue", manifests, "apply", "-f", "-")
	t.Cleanup(func() {
		for _, cluster := range []string{"blue", "green"} {
			kubectl(t, cluster, "", "delete", "validatingwebhookconfiguration", "shapes-policy-guard", "shapes-tenant-guard", "--ignore-not-found")
		}
	})

	code, out, errOut := runFerry(t, "plan", "--from", "blue", "-f", namespacesConfig(t, ns))
	if !strings.Contains(out, "its server's Service in namespace shapes-policy-engine") {
		t.Errorf("ferry plan (exit %d) does not say why the policy engine's webhook stays\n%s\n%s", code, out, errOut)
	}
	store := moveNamespace(t, ns, "hooked")
	if _, err := greenKC.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "shapes-policy-guard", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the policy engine's webhook, whose server stays on blue, is on green (%v)", err)
	}
	if _, err := greenKC.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "shapes-tenant-guard", metav1.GetOptions{}); err != nil {
		t.Errorf("the tenant's webhook, served from its namespace, is not on green: %v", err)
	}
	policed := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "policed", Labels: map[string]string{"shapes-policed": "true"}}}
	if _, err := greenKC.CoreV1().ConfigMaps(ns).Create(ctx, policed, metav1.CreateOptions{}); err != nil {
		t.Errorf("green refuses what the policy engine's webhook matches: %v", err)
	}
	if code, out, errOut := runFerry(t, "--storage", store, "verify", "--to", "green", "--backup", "hooked"); code != 0 {
		t.Errorf("ferry verify exited %d\n%s\n%s", code, out, errOut)
	}
}

// TestPolicyBindingsFollowTheirParameters: a ValidatingAdmissionPolicy of a tenant's namespace,
// whose binding takes its parameters from a ConfigMap there and matches the namespace by name,
// restored under another name (--namespace-map). The binding must name the namespace as mapped:
// left as it was, it matched no namespace on green, and green admitted what blue refuses.
func TestPolicyBindingsFollowTheirParameters(t *testing.T) {
	ctx := context.Background()
	const ns, mapped, policy = "shapes-params", "shapes-params-green", "shapes-param-policy"
	_, greenKC := restoreShapesNamespace(t, ns)
	removeAfter(t, mapped, greenKC)
	kubectl(t, "blue", `apiVersion: v1
kind: ConfigMap
metadata: {name: limits, namespace: `+ns+`}
data: {forbidden: refused}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: `+policy+`}
spec:
  failurePolicy: Fail
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [secrets]}]
  validations:
  - expression: "!(object.metadata.name in params.data)"
    message: the name is forbidden by the namespace's limits
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: `+policy+`}
spec:
  policyName: `+policy+`
  validationActions: [Deny]
  paramRef: {name: limits, namespace: `+ns+`, parameterNotFoundAction: Deny}
  matchResources:
    namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: `+ns+`}}
`, "apply", "-f", "-")
	t.Cleanup(func() {
		for _, cluster := range []string{"blue", "green"} {
			kubectl(t, cluster, "", "delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", policy, "--ignore-not-found")
		}
	})
	secret := func(name string) *corev1.Secret { return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}} }
	_, blueKC := clients(t, "blue")
	waitUntil(t, "blue's policy refusing the forbidden name", 30*time.Second, func(ctx context.Context) (bool, error) {
		_, err := blueKC.CoreV1().Secrets(ns).Create(ctx, secret("forbidden"), metav1.CreateOptions{})
		return err != nil && strings.Contains(err.Error(), "forbidden by the namespace's limits"), nil
	})

	store := "file://" + filepath.Join(t.TempDir(), "store")
	// The policy is cluster-scoped: it moves with the selection, as the binding does with its parameters' namespace.
	if code, out, errOut := runFerry(t, "--storage", store, "backup", "--from", "blue", "-f", namespacesConfig(t, ns), "--name", "params"); code != 0 {
		t.Fatalf("ferry backup exited %d\n%s\n%s", code, out, errOut)
	}
	if code, rep, errOut := runReportCommand(t, "--storage", store, "restore", "--to", "green", "--backup", "params", "--namespace-map", ns+"="+mapped); code != 0 {
		t.Fatalf("restore exited %d: %s %+v\nstderr: %s", code, rep.Error, rep.Items, errOut)
	}
	binding, err := greenKC.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Get(ctx, policy, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the binding is not on green: %v", err)
	}
	if ref := binding.Spec.ParamRef; ref == nil || ref.Namespace != mapped {
		t.Errorf("green's binding takes its parameters from %+v, want namespace %s", ref, mapped)
	}
	waitUntil(t, "green's policy refusing the forbidden name in "+mapped, 30*time.Second, func(ctx context.Context) (bool, error) {
		_, err := greenKC.CoreV1().Secrets(mapped).Create(ctx, secret("forbidden"), metav1.CreateOptions{})
		if err == nil {
			greenKC.CoreV1().Secrets(mapped).Delete(ctx, "forbidden", metav1.DeleteOptions{})
		}
		return err != nil && strings.Contains(err.Error(), "forbidden by the namespace's limits"), nil
	})
	if _, err := greenKC.CoreV1().Secrets(mapped).Create(ctx, secret("allowed"), metav1.CreateOptions{}); err != nil {
		t.Errorf("green refuses a name the limits allow: %v", err)
	}
	if code, out, errOut := runFerry(t, "--storage", store, "verify", "--to", "green", "--backup", "params", "--namespace-map", ns+"="+mapped); code != 0 {
		t.Errorf("ferry verify exited %d\n%s\n%s", code, out, errOut)
	}
}

// TestAutoscaledWritersStayStopped: KEDA scales a queue's consumer from zero as soon as messages
// wait (an HPA leaves a workload at zero alone). A migration scaled the consumer, which writes to a
// claim, to zero; KEDA scaled it up again, and the run stopped, saying an autoscaler started a
// writer, until the operator paused KEDA by hand. Now a ScaledObject that scales a workload the
// quiesce stops is paused at zero replicas with it (KEDA's autoscaling.keda.sh/paused-replicas),
// and unpaused where the workload starts again: on green after the cutover, blue's staying paused.
// KEDA is played here by a loop that does what it does with messages waiting.
func TestAutoscaledWritersStayStopped(t *testing.T) {
	const ns, paused = "shapes-keda", "autoscaling.keda.sh/paused-replicas"
	blueKC, greenKC := cutoverShapesNamespace(t, ns)
	ctx := context.Background()
	keda := testCRD{group: "keda.sh", kind: "ScaledObject", version: "v1alpha1"}
	cutoverCRDs(t, keda)
	blueClaim(t, ns, "queue-data", map[string][]byte{"offsets.json": []byte(`{"orders": 41}`)}, func(s *corev1.PersistentVolumeClaimSpec) { s.StorageClassName = ptr.To("gp3") })
	claimWriter(t, blueKC, ns, "consumer", "queue-data")
	kubectl(t, "blue", `apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata: {name: consumer, namespace: `+ns+`}
spec:
  scaleTargetRef: {name: consumer}
  minReplicaCount: 0
  triggers: [{type: rabbitmq, metadata: {queueName: orders, mode: QueueLength, value: "20"}}]
`, "apply", "-f", "-")
	runningPod(t, blueKC, ns, "app=consumer")

	blueDyn, cutoverDyn := cutoverDynamic(t)
	playKEDA(t, blueKC, blueDyn, keda.gvr(), ns, "consumer")
	playKEDA(t, greenKC, cutoverDyn, keda.gvr(), ns, "consumer")
	migrateShapes(t, ns, "a consumer KEDA scales")
	d, err := blueKC.AppsV1().Deployments(ns).Get(ctx, "consumer", metav1.GetOptions{})
	if err != nil || *d.Spec.Replicas != 0 {
		t.Errorf("blue's consumer after the migration: %v (%v); want it at 0 replicas", d.Spec.Replicas, err)
	}
	so, err := blueDyn.Resource(keda.gvr()).Namespace(ns).Get(ctx, "consumer", metav1.GetOptions{})
	if err != nil || so.GetAnnotations()[paused] != "0" {
		t.Errorf("blue's ScaledObject after the migration: annotations %v (%v); want it paused at 0 replicas", so.GetAnnotations(), err)
	}
	if so, err := cutoverDyn.Resource(keda.gvr()).Namespace(ns).Get(ctx, "consumer", metav1.GetOptions{}); err != nil || so.GetAnnotations()[paused] != "" {
		t.Errorf("green's ScaledObject after the migration: %v (%v); want it not paused", so, err)
	}
	if d, err := greenKC.AppsV1().Deployments(ns).Get(ctx, "consumer", metav1.GetOptions{}); err != nil || *d.Spec.Replicas != 1 {
		t.Errorf("green's consumer after the migration: %v; want 1 replica", err)
	}
}

// TestAPolicyThatRefusesTheQuiesceStopsNothing: an admission policy that forbids a Deployment at
// zero replicas (Kyverno's and Gatekeeper's libraries hold such rules for production
// namespaces; here a ValidatingAdmissionPolicy) refused the quiesce part way: blue's CronJob was
// already suspended, its writer still running, and the run stopped there. Now the quiesce tries
// every change as a dry run first: the run stops before anything is stopped, naming the writer
// and the policy's message; once the policy lets it pass, the resumed run shifts.
func TestAPolicyThatRefusesTheQuiesceStopsNothing(t *testing.T) {
	const ns = "shapes-policy"
	blueKC, greenKC := cutoverShapesNamespace(t, ns)
	ctx := context.Background()
	kubectl(t, "blue", `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: shapes-min-replicas}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules: [{apiGroups: [apps], apiVersions: [v1], operations: [UPDATE], resources: [deployments]}]
  validations:
  - expression: "!has(object.spec.replicas) || object.spec.replicas >= 1"
    message: a Deployment here keeps at least one replica
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: shapes-min-replicas}
spec:
  policyName: shapes-min-replicas
  validationActions: [Deny]
  matchResources: {namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: `+ns+`}}}
`, "apply", "-f", "-")
	t.Cleanup(func() {
		kubectl(t, "blue", "", "delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", "shapes-min-replicas", "--ignore-not-found")
	})
	blueClaim(t, ns, "ledger", map[string][]byte{"entries.log": []byte("1 credit 40\n")}, func(s *corev1.PersistentVolumeClaimSpec) { s.StorageClassName = ptr.To("gp3") })
	claimWriter(t, blueKC, ns, "writer", "ledger")
	report := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Name: "report"}, Spec: batchv1.CronJobSpec{Schedule: "0 0 1 1 *",
		JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "report", Image: "report"}}}}}}}}
	if _, err := blueKC.BatchV1().CronJobs(ns).Create(ctx, report, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	runningPod(t, blueKC, ns, "app=writer")
	refuses := func(ctx context.Context) bool {
		_, err := blueKC.AppsV1().Deployments(ns).Patch(ctx, "writer", types.MergePatchType, []byte(`{"spec":{"replicas":0}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil
	}
	waitUntil(t, "the policy refuses the writer at zero replicas", time.Minute, func(ctx context.Context) (bool, error) { return refuses(ctx), nil })

	config := gp3Config(t, ns)
	store := "file://" + filepath.Join(t.TempDir(), "store")
	code, out, errOut := runFerry(t, "--storage", store, "migrate", "--from", "blue", "--to", "cutover", "-f", config, "--lease-ttl", testLeaseTTL.String())
	if code != 3 || !strings.Contains(errOut, "deployments.apps "+ns+"/writer") || !strings.Contains(errOut, "a Deployment here keeps at least one replica") {
		t.Errorf("ferry migrate under a policy that refuses the writer at zero replicas exited %d, want 3 naming the writer and the policy's message\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	cj, err := blueKC.BatchV1().CronJobs(ns).Get(ctx, "report", metav1.GetOptions{})
	if err != nil || (cj.Spec.Suspend != nil && *cj.Spec.Suspend) {
		t.Errorf("blue's CronJob report after the refused run: suspend %v (%v); want nothing stopped", cj.Spec.Suspend, err)
	}
	if d, err := blueKC.AppsV1().Deployments(ns).Get(ctx, "writer", metav1.GetOptions{}); err != nil || *d.Spec.Replicas != 1 {
		t.Errorf("blue's writer after the refused run: %v; want 1 replica", err)
	}
	t.Logf("ferry migrate exited %d: %s", code, errOut[strings.LastIndex(strings.TrimSpace(errOut), "\n")+1:])
	id := runID(t, errOut)
	kubectl(t, "blue", "", "delete", "validatingadmissionpolicybinding", "shapes-min-replicas")
	waitUntil(t, "the policy no longer refuses", time.Minute, func(ctx context.Context) (bool, error) { return !refuses(ctx), nil })
	code, out, errOut = runFerry(t, "--storage", store, "migrate", "--resume", id, "--lease-ttl", testLeaseTTL.String())
	if code != 0 || !strings.Contains(out, "shifted") {
		t.Fatalf("ferry migrate --resume (the policy lets it pass) exited %d, want 0 and shifted\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if d, err := greenKC.AppsV1().Deployments(ns).Get(ctx, "writer", metav1.GetOptions{}); err != nil || *d.Spec.Replicas != 1 {
		t.Errorf("green's writer after the migration: %v; want 1 replica", err)
	}
}

// gp3Config writes a ferry.yaml for a migration of namespace ns whose claims, of class gp3 on
// blue, are of class standard on the target, and returns its path.
func gp3Config(t *testing.T, ns string) string {
	t.Helper()
	config := filepath.Join(t.TempDir(), "ferry.yaml")
	if err := os.WriteFile(config, []byte("include: {namespaces: ["+ns+"]}\nstorageClassMap: {gp3: standard}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return config
}

// claimWriter creates a one-replica Deployment name (label app=name) whose pods mount claim at
// /data.
func claimWriter(t *testing.T, kc kubernetes.Interface, ns, name, claim string) {
	t.Helper()
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1),
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: name, Image: name, VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
			Volumes:    []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}}}}}
	if _, err := kc.AppsV1().Deployments(ns).Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// cutoverCRDs makes crds on blue for a test that migrates onto the cutover cluster (the migration
// makes them there), and deletes them from both after.
func cutoverCRDs(t *testing.T, crds ...testCRD) {
	t.Helper()
	var names []string
	for _, crd := range crds {
		kubectl(t, "blue", crd.manifest(), "apply", "-f", "-")
		kubectl(t, "blue", "", "wait", "--for=condition=Established", "crd/"+crd.name(), "--timeout=60s")
		names = append(names, crd.name())
	}
	t.Cleanup(func() {
		for _, cluster := range []string{"blue", "cutover"} {
			kubectl(t, cluster, "", append(append([]string{"delete", "crd"}, names...), "--ignore-not-found", "--wait")...)
		}
	})
}

// cutoverDynamic are the dynamic clients of blue and the cutover cluster.
func cutoverDynamic(t *testing.T) (blue, green dynamic.Interface) {
	t.Helper()
	_, blue, err := tb.Clusters["blue"].Clients()
	if err != nil {
		t.Fatal(err)
	}
	_, green, err = tb.Clusters["cutover"].Clients()
	if err != nil {
		t.Fatal(err)
	}
	return blue, green
}

// migrateShapes migrates namespace ns from blue onto the cutover cluster (its gp3 claims made
// standard there) and fails the test unless the run shifted; what names what the namespace holds.
// It returns the run's report.
func migrateShapes(t *testing.T, ns, what string) string {
	t.Helper()
	_, _, out := migrateShapesRun(t, ns, what)
	return out
}

// migrateShapesRun is migrateShapes giving also the run's storage and ID.
func migrateShapesRun(t *testing.T, ns, what string) (store, id, out string) {
	t.Helper()
	store = "file://" + filepath.Join(t.TempDir(), "store")
	code, out, errOut := runFerry(t, "--storage", store, "migrate", "--from", "blue", "--to", "cutover", "-f", gp3Config(t, ns), "--lease-ttl", testLeaseTTL.String())
	if code != 0 || !strings.Contains(out, "shifted") {
		t.Fatalf("ferry migrate of %s exited %d, want 0 and shifted\nstdout: %s\nstderr: %s", what, code, out, errOut)
	}
	return store, runID(t, errOut), out
}

// cutoverShapesNamespace makes namespace ns on blue for a test that migrates it onto the cutover
// cluster, and removes it from both after.
func cutoverShapesNamespace(t *testing.T, ns string) (blue, green kubernetes.Interface) {
	t.Helper()
	_, green = cutover(t)
	_, blue = clients(t, "blue")
	removeAfter(t, ns, blue, green)
	createNamespace(t, blue, ns, nil)
	return blue, green
}

// playKEDA does, until the test ends, what KEDA does with messages waiting for the workload of the
// ScaledObject name (of type so) in namespace ns on a cluster: it scales the Deployment of that
// name from zero to one, and while the ScaledObject is paused (paused-replicas) holds it at the
// paused count.
func playKEDA(t *testing.T, kc kubernetes.Interface, dyn dynamic.Interface, so schema.GroupVersionResource, ns, name string) {
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { stop(); <-done })
	scale := func(replicas int32) {
		kc.AppsV1().Deployments(ns).Patch(ctx, name, types.MergePatchType, fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, replicas), metav1.PatchOptions{FieldManager: "keda"})
	}
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			obj, err := dyn.Resource(so).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
			d, derr := kc.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
			if err == nil && derr == nil {
				paused, isPaused := obj.GetAnnotations()["autoscaling.keda.sh/paused-replicas"]
				count, perr := strconv.Atoi(paused)
				switch {
				case isPaused && perr == nil && *d.Spec.Replicas != int32(count):
					scale(int32(count))
				case !isPaused && *d.Spec.Replicas == 0:
					scale(1)
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
}

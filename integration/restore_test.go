package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/ferrykube/ferry/integration/testbed"
	"github.com/ferrykube/ferry/snapshot"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// restoreReport is what ferry restore and ferry verify print with -o json.
type restoreReport struct {
	Result string                    `json:"result"`
	Error  string                    `json:"error"`
	Counts map[string]map[string]int `json:"counts"`
	Items  []snapshot.ReportItem     `json:"items"`
}

func runReportCommand(t *testing.T, args ...string) (int, restoreReport, string) {
	t.Helper()
	code, out, errOut := runFerry(t, append(args, "-o", "json")...)
	var rep restoreReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("ferry %s exited %d without a JSON report: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, err, out, errOut)
	}
	return code, rep, errOut
}

var (
	freshOnce    sync.Once
	freshCluster *testbed.Cluster
	freshErr     error
)

// fresh is a cluster created for restores, that has never seen blue: what a disaster recovery
// restores into. Like a new cluster it has a default storage class with a provisioner, and its
// database and MinIO pods, once restored, are served by the testbed's green servers.
func fresh(t *testing.T) (*testbed.Cluster, kubernetes.Interface) {
	t.Helper()
	testbed.Require(t, tb)
	freshOnce.Do(func() {
		ctx := context.Background()
		if freshCluster, freshErr = tb.AddCluster(ctx, "dr"); freshErr == nil {
			freshErr = tb.ServePlatform(ctx, freshCluster, "green")
		}
	})
	if freshErr != nil {
		t.Fatal(freshErr)
	}
	kc, _, err := freshCluster.Clients()
	if err != nil {
		t.Fatal(err)
	}
	return freshCluster, kc
}

// TestRestoreOntoAFreshCluster backs up blue — the platform, its MySQL, its bucket and a user's
// volume of files — restores it onto a cluster that never saw it, and verifies: zero differences,
// the data equal when read independently, the Deployments Available; a second restore changes
// nothing; each tampering is named exactly, and nothing else.
func TestRestoreOntoAFreshCluster(t *testing.T) {
	blueMySQL(t)
	objects := blueMinIO(t)
	_, kc := fresh(t)
	ctx := context.Background()
	blue, blueKC := clients(t, "blue")
	createClaim(t, blueKC, "restore-data", "workspace", nil)
	volume := dataDir(t, "restore-data-workspace")
	fillVolume(t, volume)
	if err := blue.BindClaim(ctx, "restore-data", "workspace", volume); err != nil {
		t.Fatal(err)
	}
	// A workload that mounts the claim: on the fresh cluster it must not start before the claim's
	// files are in place (it would start on an empty volume).
	mountClaim(t, blueKC, "restore-data", "notebook", "workspace")
	t.Cleanup(func() { // later tests back up blue and restore onto this cluster, and would meet it
		deleteDeployment(t, blueKC, "restore-data", "notebook")
		deleteDeployment(t, kc, "restore-data", "notebook")
	})

	url := backupMinIO(t, "restore")
	if code, out, errOut := runFerry(t, "--storage", url, "backup", "--from", "blue", "--preset", "kubeflow", "--name", "whole-blue"); code != 0 && code != 3 {
		t.Fatalf("ferry backup exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	_, manifest := readManifest(t, url, "whole-blue")

	classes := []string{"--storage-class-map", "gp3=standard,nfs-client=standard"}
	code, rep, errOut := runReportCommand(t, append([]string{"--storage", url, "restore", "--to", "dr", "--backup", "whole-blue"}, classes...)...)
	t.Logf("restore: exit %d, %v", code, rep.Counts)
	for _, it := range rep.Items {
		t.Logf("  %s %s %s: %s", it.Kind, it.Status, it.Name, it.Detail)
	}
	for kind, counts := range rep.Counts {
		if counts[snapshot.StatusFailed] > 0 || rep.Error != "" {
			t.Fatalf("restore exited %d with failed %s: %s\nstderr: %s", code, kind, rep.Error, errOut)
		}
	}
	restored := rep.Counts["objects"][snapshot.StatusRestored]
	// The fresh cluster's database and MinIO are the testbed's green servers, which earlier tests may
	// have filled with the same data already: unchanged counts as there.
	there := func(kind string) int {
		return rep.Counts[kind][snapshot.StatusRestored] + rep.Counts[kind][snapshot.StatusUnchanged]
	}
	if restored == 0 || restored > len(manifest.Objects) || there("volumes") == 0 || there("databases") == 0 || there("buckets") != len(objects) {
		t.Fatalf("restored %d objects of %d in the backup, and some data: %+v", restored, len(manifest.Objects), rep.Counts)
	}
	// Read back independently: the volume's tree, the tables, the bucket.
	if got, want := walkTree(t, claimFolder(t, kc, "restore-data", "workspace")), walkTree(t, volume); !slices.Equal(got, want) {
		t.Errorf("the volume on the fresh cluster differs from blue's:\n%s", lineDiff(want, got))
	}
	notebook, err := kc.AppsV1().Deployments("restore-data").Get(ctx, "notebook", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The API server keeps creation times to the second.
	if filled := newestChange(t, claimFolder(t, kc, "restore-data", "workspace")).Truncate(time.Second); notebook.CreationTimestamp.Time.Before(filled) {
		t.Errorf("the Deployment that mounts the claim was made at %s, before the claim's files were in place (%s)",
			notebook.CreationTimestamp.Time.UTC().Format(time.RFC3339), filled.UTC().Format(time.RFC3339))
	}
	rows, err := tb.MariaDB["green"].SQL(ctx, tb.Bins, "SELECT COUNT(*) FROM mlpipeline.run_details")
	if err != nil || strings.TrimSpace(lastLine(rows)) != "500" {
		t.Errorf("mlpipeline.run_details on the fresh cluster's database: %q (%v), want 500 rows", rows, err)
	}
	for key, data := range objects {
		if got := getBucketObject(t, tb.MinIO["green"], "mlpipeline", key); !bytes.Equal(got, data) {
			t.Errorf("bucket object %q on the fresh cluster's MinIO differs (%d bytes, want %d)", key, len(got), len(data))
		}
	}

	verify := func(t *testing.T, args ...string) (int, restoreReport) {
		t.Helper()
		code, rep, errOut := runReportCommand(t, append([]string{"--storage", url, "verify", "--to", "dr", "--backup", "whole-blue"}, append(classes, args...)...)...)
		if code == 1 || code == 2 {
			t.Fatalf("verify could not verify (exit %d): %s\nstderr: %s", code, rep.Error, errOut)
		}
		return code, rep
	}
	if code, rep := verify(t); code != 0 || len(rep.Items) > 0 {
		t.Fatalf("verify after the restore exited %d with %d differences: %+v", code, len(rep.Items), rep.Items)
	} else if rep.Counts["objects"][snapshot.StatusIdentical] == 0 || rep.Counts["health"][snapshot.StatusHealthy] == 0 {
		t.Fatalf("verify checked nothing: %v", rep.Counts)
	}
	deployments, err := kc.AppsV1().Deployments("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range deployments.Items {
		if !available(d) {
			t.Errorf("Deployment %s/%s is not Available on the fresh cluster", d.Namespace, d.Name)
		}
	}

	// Restoring twice: no errors, nothing created or changed.
	code, rep, _ = runReportCommand(t, append([]string{"--storage", url, "restore", "--to", "dr", "--backup", "whole-blue"}, classes...)...)
	if rep.Counts["objects"][snapshot.StatusRestored] != 0 || rep.Counts["objects"][snapshot.StatusFailed] != 0 ||
		rep.Counts["objects"][snapshot.StatusUnchanged] < restored {
		t.Fatalf("second restore (exit %d) should find all %d objects unchanged: %v %+v", code, restored, rep.Counts, rep.Items)
	}
	if code, rep := verify(t); code != 0 {
		t.Fatalf("verify after the second restore exited %d: %+v", code, rep.Items)
	}

	// Tampering, one item at a time: exactly that item is named.
	cms := kc.CoreV1().ConfigMaps("kubeflow")
	victim := "pipeline-install-config"
	if err := cms.Delete(ctx, victim, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	code, rep = verify(t)
	wantOnly(t, code, rep, snapshot.ReportItem{Kind: "objects", Status: snapshot.StatusMissing, Name: "v1 ConfigMap kubeflow/" + victim})

	if code, rep, _ := runReportCommand(t, append([]string{"--storage", url, "restore", "--to", "dr", "--backup", "whole-blue"}, classes...)...); rep.Counts["objects"][snapshot.StatusRestored] != 1 {
		t.Fatalf("restoring again (exit %d) should recreate the one deleted object: %v", code, rep.Counts)
	}
	cm, err := cms.Get(ctx, victim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	key := slices.Sorted(maps.Keys(cm.Data))[0]
	cm.Data[key] = cm.Data[key] + "-changed"
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	code, rep = verify(t)
	wantOnly(t, code, rep, snapshot.ReportItem{Kind: "objects", Status: snapshot.StatusDifferent, Name: "v1 ConfigMap kubeflow/" + victim})
	if detail := rep.Items[0].Detail; !strings.HasPrefix(detail, "data."+key+": backup ") {
		t.Errorf("the difference should name data.%s with both values: %q", key, detail)
	}
	// --existing update puts the backed-up version back.
	if code, rep, _ := runReportCommand(t, append([]string{"--storage", url, "restore", "--to", "dr", "--backup", "whole-blue", "--existing", "update"}, classes...)...); rep.Error != "" || rep.Counts["objects"][snapshot.StatusUpdated] != 1 || rep.Counts["objects"][snapshot.StatusFailed] != 0 {
		t.Fatalf("restore --existing update (exit %d) should update the one changed object: %v %+v", code, rep.Counts, rep.Items)
	}
	if code, rep := verify(t); code != 0 {
		t.Fatalf("verify after --existing update exited %d: %+v", code, rep.Items)
	}
}

// TestRestoreMapsNamespaces restores one tenant's namespace under another name: its objects land
// there, RoleBinding subjects follow, and verify with the same mapping is clean.
func TestRestoreMapsNamespaces(t *testing.T) {
	ns := "bob"
	if applyPlatform(t) {
		ns = "kubeflow-user-example-com"
	}
	to := "team-" + ns
	_, kc := fresh(t)
	ctx := context.Background()
	_, blue := clients(t, "blue")
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "editors", Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "edit"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "default-editor", Namespace: ns}, {Kind: "User", Name: "bob@example.com", APIGroup: "rbac.authorization.k8s.io"},
			// The namespace's accounts as the API server names them.
			{Kind: "Group", Name: "system:serviceaccounts:" + ns, APIGroup: "rbac.authorization.k8s.io"},
			{Kind: "User", Name: "system:serviceaccount:" + ns + ":default-viewer", APIGroup: "rbac.authorization.k8s.io"}},
	}
	if _, err := blue.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		_, err = blue.RbacV1().RoleBindings(ns).Update(ctx, rb, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	} else if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { blue.RbacV1().RoleBindings(ns).Delete(context.Background(), "editors", metav1.DeleteOptions{}) })
	// Pods of the namespace may reach each other, by the namespace's name label.
	sameNamespace := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "same-namespace", Namespace: ns},
		Spec: networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
			{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}},
			{NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: []string{ns, "monitoring"}}}}},
		}}}}}
	if _, err := blue.NetworkingV1().NetworkPolicies(ns).Create(ctx, sameNamespace, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		blue.NetworkingV1().NetworkPolicies(ns).Delete(context.Background(), "same-namespace", metav1.DeleteOptions{})
	})
	url := backupMinIO(t, "mapping")
	if code, out, errOut := runFerry(t, "--storage", url, "backup", "--from", "blue", "--preset", "kubeflow", "--name", "for-mapping"); code != 0 && code != 3 {
		t.Fatalf("ferry backup exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	mapping := []string{"--include-namespaces", ns, "--namespace-map", ns + "=" + to}
	code, rep, errOut := runReportCommand(t, append([]string{"--storage", url, "restore", "--to", "dr", "--backup", "for-mapping"}, mapping...)...)
	if rep.Counts["objects"][snapshot.StatusFailed] != 0 || rep.Counts["objects"][snapshot.StatusRestored] == 0 {
		t.Fatalf("restore with a namespace mapping exited %d: %v %+v\nstderr: %s", code, rep.Counts, rep.Items, errOut)
	}
	// The platform's database and bucket live in another namespace: one tenant's restore leaves them.
	if len(rep.Counts["databases"])+len(rep.Counts["buckets"]) > 0 {
		t.Errorf("a restore of namespace %s alone touched databases or buckets: %v", ns, rep.Counts)
	}
	for _, it := range rep.Items {
		if it.Kind == "volumes" && !strings.HasPrefix(it.Name, to+"/") {
			t.Errorf("a restore of namespace %s alone reported volume %s: %s %s", ns, it.Name, it.Status, it.Detail)
		}
	}
	got, err := kc.RbacV1().RoleBindings(to).Get(ctx, "editors", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Subjects[0].Namespace != to || got.Subjects[1].Namespace != "" || got.Subjects[1].Name != "bob@example.com" ||
		got.Subjects[2].Name != "system:serviceaccounts:"+to || got.Subjects[3].Name != "system:serviceaccount:"+to+":default-viewer" {
		t.Errorf("RoleBinding subjects should follow the mapping: %+v", got.Subjects)
	}
	np, err := kc.NetworkingV1().NetworkPolicies(to).Get(ctx, "same-namespace", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if from := np.Spec.Ingress[0].From; from[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != to ||
		!slices.Equal(from[1].NamespaceSelector.MatchExpressions[0].Values, []string{to, "monitoring"}) {
		t.Errorf("the NetworkPolicy's namespace selectors should follow the mapping: %+v", from)
	}
	code, rep, errOut = runReportCommand(t, append([]string{"--storage", url, "verify", "--to", "dr", "--backup", "for-mapping"}, mapping...)...)
	if code != 0 {
		t.Fatalf("verify with the same mapping exited %d: %+v\nstderr: %s", code, rep.Items, errOut)
	}
}

// TestRestoreRefusesBadBackups: a missing manifest, a tampered archive and a wrong age identity
// are clear errors and nothing is applied.
func TestRestoreRefusesBadBackups(t *testing.T) {
	applyPlatform(t)
	_, kc := fresh(t)
	dir := t.TempDir()
	store := "file://" + dir
	// The platform's namespace is enough here: its claims hold the database and the bucket.
	config := filepath.Join(t.TempDir(), "ferry.yaml")
	if err := os.WriteFile(config, []byte("preset: kubeflow\ninclude: {namespaces: [kubeflow]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runFerry(t, "--storage", store, "backup", "--from", "blue", "-f", config, "--name", "to-tamper"); code != 0 && code != 3 {
		t.Fatalf("ferry backup exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if code, _, errOut := runFerry(t, "--storage", store, "restore", "--to", "dr", "--backup", "no-such-backup"); code != 2 || !strings.Contains(errOut, `no backup named "no-such-backup"`) {
		t.Errorf("restore of a missing backup: exit %d, %s", code, errOut)
	}
	tamperArchive(t, dir, "to-tamper")
	before, err := kc.CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	code, _, errOut := runFerry(t, "--storage", store, "restore", "--to", "dr", "--backup", "to-tamper", "--namespace-map", "kubeflow=tampered")
	if code != 2 || !strings.Contains(errOut, "to-tamper.tar.gz") || !strings.Contains(errOut, "manifest") {
		t.Errorf("restore of a tampered archive: exit %d, %s", code, errOut)
	}

	// An encrypted backup: without a key, and with the wrong one.
	right, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	wrong, _ := age.GenerateX25519Identity()
	wrongKey := filepath.Join(t.TempDir(), "wrong.key")
	if err := os.WriteFile(wrongKey, []byte(wrong.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runFerry(t, "--storage", store, "backup", "--from", "blue", "-f", config, "--name", "sealed-restore",
		"--encrypt-to", right.Recipient().String()); code != 0 && code != 3 {
		t.Fatalf("ferry backup --encrypt-to exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if code, _, errOut := runFerry(t, "--storage", store, "restore", "--to", "dr", "--backup", "sealed-restore"); code != 2 || !strings.Contains(errOut, "give the key with --identity") {
		t.Errorf("restore of an encrypted backup without a key: exit %d, %s", code, errOut)
	}
	if code, _, errOut := runFerry(t, "--storage", store, "restore", "--to", "dr", "--backup", "sealed-restore", "--identity", wrongKey,
		"--namespace-map", "kubeflow=wrong-key"); code != 2 || !strings.Contains(errOut, "not one the backup was encrypted to") {
		t.Errorf("restore with the wrong identity: exit %d, %s", code, errOut)
	}

	after, err := kc.CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(after.Items) != len(before.Items) {
		t.Errorf("a tampered or unreadable backup must apply nothing: namespaces went from %d to %d", len(before.Items), len(after.Items))
	}
}

// mountClaim creates in namespace a one-replica Deployment whose pods mount claim.
func mountClaim(t *testing.T, kc kubernetes.Interface, namespace, name, claim string) {
	t.Helper()
	createDeployment(t, kc, namespace, name, corev1.PodSpec{
		Containers: []corev1.Container{{Name: name, Image: name, VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
		Volumes:    []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}},
	})
}

// deleteDeployment deletes a Deployment with its ReplicaSets and pods, and waits until they are gone.
func deleteDeployment(t *testing.T, kc kubernetes.Interface, namespace, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	foreground := metav1.DeletePropagationForeground
	deployments := kc.AppsV1().Deployments(namespace)
	if err := deployments.Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &foreground}); apierrors.IsNotFound(err) {
		return
	} else if err != nil {
		t.Errorf("delete Deployment %s/%s: %v", namespace, name, err)
		return
	}
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := deployments.Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Errorf("Deployment %s/%s is still there: %v", namespace, name, err)
	}
}

// newestChange is the latest change time (ctime) of dir's entries: when the last of them was written,
// renamed or had its metadata set.
func newestChange(t *testing.T, dir string) time.Time {
	t.Helper()
	var newest time.Time
	eachStat(t, dir, func(_ string, st *syscall.Stat_t) {
		if c := time.Unix(st.Ctim.Sec, st.Ctim.Nsec); c.After(newest) {
			newest = c
		}
	})
	return newest
}

func available(d appsv1.Deployment) bool {
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentAvailable {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func wantOnly(t *testing.T, code int, rep restoreReport, want snapshot.ReportItem) {
	t.Helper()
	if code != 3 || len(rep.Items) != 1 || rep.Items[0].Kind != want.Kind || rep.Items[0].Status != want.Status || rep.Items[0].Name != want.Name {
		t.Fatalf("verify should exit 3 naming only %s %s %s; exit %d, items %+v", want.Kind, want.Status, want.Name, code, rep.Items)
	}
}

// getBucketObject reads an object of a testbed MinIO.
func getBucketObject(t *testing.T, m *testbed.MinIO, bucket, key string) []byte {
	t.Helper()
	out, err := m.S3Client().GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		t.Errorf("get %s/%s: %v", bucket, key, err)
		return nil
	}
	defer out.Body.Close()
	data, err := io.ReadAll(out.Body)
	if err != nil {
		t.Error(err)
	}
	return data
}

// tamperArchive changes one byte in the middle of a backup's object archive in file storage.
func tamperArchive(t *testing.T, dir, backup string) {
	t.Helper()
	file := filepath.Join(dir, "backups", backup, backup+".tar.gz")
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0x5a
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

package integration

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ferrykube/ferry/snapshot"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// TestClaimsWithoutAVolumeAreNoLoss backs up a namespace holding a claim that never had a volume
// (pending, as a notebook's workspace is until its notebook first starts) beside one with files.
// Such a claim holds no data, so the backup holds all there is: it exits 0 and names the claim
// as having nothing to copy, not as skipped; a restore makes the claim again, pending, and exits
// 0. A claim that was pending when the plan was made but has a volume by the time of the backup
// does hold data the plan did not read: that backup names it as skipped and exits 3. On green,
// where the claim's class binds it only for its first pod (WaitForFirstConsumer), the claim stays
// pending, as on blue, and verify passes without waiting for it to bind. A clone waiting for its
// first pod is to be filled from its source: it is skipped.
func TestClaimsWithoutAVolumeAreNoLoss(t *testing.T) {
	const ns = "pending-claims"
	blue, _ := clients(t, "blue")
	kc, greenKC := restoreShapesNamespace(t, ns)
	ctx := context.Background()
	wffc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "pc-wait-for-consumer"}, Provisioner: "ferry.dev/testbed",
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer)}
	for _, c := range []kubernetes.Interface{kc, greenKC} {
		if _, err := c.StorageV1().StorageClasses().Create(ctx, wffc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	for claim, class := range map[string]string{"notes": "standard", "never-used": wffc.Name, "bound-later": "standard"} {
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: claim},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: ptr.To(class),
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
		if _, err := kc.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	bindWith := func(claim, file string) {
		dir := dataDir(t, "pending-claims-"+claim)
		if err := os.WriteFile(filepath.Join(dir, file), []byte("written before the backup\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := blue.BindClaim(ctx, ns, claim, dir); err != nil {
			t.Fatal(err)
		}
	}
	bindWith("notes", "a.txt")
	scope := []string{"--from", "blue", "-f", namespacesConfig(t, ns)}
	planFile := filepath.Join(t.TempDir(), "plan.json")
	if code, _, errOut := runFerry(t, append([]string{"plan", "-o", planFile}, scope...)...); code != 0 {
		t.Fatalf("ferry plan exited %d: %s", code, errOut)
	}
	bindWith("bound-later", "results.csv") // after the plan: its files are data the plan did not read

	url := backupMinIO(t, "pending-claims")
	volumeSkips := func(m *snapshot.Manifest) []string {
		var names []string
		for _, s := range m.Skipped {
			if s.Kind == "volume" {
				names = append(names, s.Name)
			}
		}
		return names
	}

	// With the plan made before bound-later had a volume: bound-later is skipped, never-used is not.
	code, out, errOut := runFerry(t, "--storage", url, "backup", "--from", "blue", "--plan", planFile, "--name", "planned-before")
	_, m := readManifest(t, url, "planned-before")
	if code != 3 || !slices.Equal(volumeSkips(m), []string{ns + "/bound-later"}) || !strings.Contains(out, ns+"/bound-later") {
		t.Errorf("a backup by a plan made before %s/bound-later had a volume exited %d and skipped volumes %v, want 3 and only that claim\nstdout: %s\nstderr: %s",
			ns, code, volumeSkips(m), out, errOut)
	}

	// Planned now: only never-used has no volume, and it holds nothing to lose.
	code, out, errOut = runFerry(t, append([]string{"--storage", url, "backup", "--name", "pending-now"}, scope...)...)
	_, m = readManifest(t, url, "pending-now")
	if code != 0 || len(m.Skipped) != 0 {
		t.Fatalf("ferry backup exited %d with skipped items %+v, want 0 and none: a claim without a volume holds no data\nstdout: %s\nstderr: %s", code, m.Skipped, out, errOut)
	}
	if !slices.ContainsFunc(m.NoData, func(s snapshot.Skipped) bool { return s.Kind == "volume" && s.Name == ns+"/never-used" }) ||
		!strings.Contains(out, ns+"/never-used") {
		t.Errorf("the backup does not name %s/never-used as having nothing to copy: manifest %+v\nstdout: %s", ns, m.NoData, out)
	}
	if got := len(m.Volumes); got != 2 {
		t.Errorf("the backup holds %d volumes, want 2 (notes, bound-later)", got)
	}

	for _, command := range []string{"restore", "verify"} {
		code, rep, errOut := runReportCommand(t, "--storage", url, command, "--to", "green", "--backup", "pending-now", "--include-namespaces", ns)
		lacking := slices.DeleteFunc(slices.Clone(rep.Items), func(it snapshot.ReportItem) bool {
			return it.Status != snapshot.StatusSkipped && it.Status != snapshot.StatusFailed && it.Status != snapshot.StatusUnhealthy
		})
		if code != 0 || len(lacking) > 0 {
			t.Fatalf("ferry %s exited %d, listing %+v; want 0 and nothing skipped, failed or unhealthy\nstderr: %s", command, code, lacking, lastLines(errOut, 10))
		}
	}
	pvc, err := greenKC.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "never-used", metav1.GetOptions{})
	if err != nil || pvc.Spec.VolumeName != "" || pvc.Status.Phase != corev1.ClaimPending {
		t.Fatalf("green's claim without a volume: %v, volume %q, %s; want it made again, pending", err, pvc.Spec.VolumeName, pvc.Status.Phase)
	}
	if data, err := os.ReadFile(filepath.Join(claimFolder(t, greenKC, ns, "bound-later"), "results.csv")); string(data) != "written before the backup\n" {
		t.Errorf("green's bound-later holds %q (%v), want the file written before the backup", data, err)
	}

	// A clone waiting for its first pod has no volume either, but is to be filled from its source,
	// which a restore does not make it with: skipped, not without data.
	clone := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "cloned"},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: ptr.To(wffc.Name),
			DataSource: &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "notes"},
			Resources:  corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	if _, err := kc.CoreV1().PersistentVolumeClaims(ns).Create(ctx, clone, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runFerry(t, append([]string{"--storage", url, "backup", "--name", "with-clone"}, scope...)...)
	_, m = readManifest(t, url, "with-clone")
	if code != 3 || !slices.Equal(volumeSkips(m), []string{ns + "/cloned"}) || !strings.Contains(out, "data source") {
		t.Errorf("a backup with a clone waiting for its first pod exited %d, skipping volumes %v; want 3 and the clone named with its data source\nstdout: %s\nstderr: %s",
			code, volumeSkips(m), out, lastLines(errOut, 10))
	}
}

package integration

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/integration/testbed"
	"github.com/ferrykube/ferry/snapshot"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
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

// TestCarryBackBringsAWorkspaceFirstUsedOnGreen: a notebook's workspace that no pod had used on
// blue (pending, of a WaitForFirstConsumer class) moves as a claim only. On green a notebook
// starts, the claim gets a volume and the notebook writes to it; rollback --carry-back must
// bring those files back into blue's claim, which binds for the carry-back's mover as it would
// for blue's notebook. A claim green's class bound at once, empty, that no one wrote to, is not
// carried back: blue's claim stays pending, and the rollback still passes.
func TestCarryBackBringsAWorkspaceFirstUsedOnGreen(t *testing.T) {
	const ns = "first-used-on-green"
	_, greenKC := cutover(t)
	blue, blueKC := clients(t, "blue")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	removeNamespace(t, ns, blueKC, greenKC)
	removeAfter(t, ns, blueKC, greenKC)
	wffc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "fu-wait-for-consumer"}, Provisioner: testbed.Provisioner,
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer)}
	for _, c := range []kubernetes.Interface{blueKC, greenKC} {
		if _, err := c.StorageV1().StorageClasses().Create(ctx, wffc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	createClaim(t, blueKC, ns, "workspace", ptr.To(wffc.Name))
	createClaim(t, blueKC, ns, "scratch", ptr.To("standard")) // blue never binds it; green's class does, at once
	createClaim(t, blueKC, ns, "notes", ptr.To("standard"))
	notesDir := dataDir(t, ns+"-notes")
	writeClaimFiles(t, notesDir, map[string][]byte{"a.txt": []byte("blue's notes\n")})
	if err := blue.BindClaim(ctx, ns, "notes", notesDir); err != nil {
		t.Fatal(err)
	}
	// Blue's provisioner, for the workspace only: it binds the claim once the scheduler picked a
	// node for a pod using it, as green's does.
	go func() {
		_ = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			pvc, err := blueKC.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "workspace", metav1.GetOptions{})
			if err != nil || pvc.Annotations["volume.kubernetes.io/selected-node"] == "" {
				return false, nil
			}
			return true, blue.BindClaim(ctx, ns, "workspace", dataDir(t, ns+"-workspace-blue"))
		})
	}()

	url := backupMinIO(t, "first-used-on-green")
	code, out, errOut := runFerry(t, "--storage", url, "migrate", "--from", "blue", "--to", "cutover", "-f", namespacesConfig(t, ns), "--lease-ttl", testLeaseTTL.String())
	if code != 0 || !strings.Contains(out, "shifted") {
		t.Fatalf("ferry migrate exited %d, want 0 and shifted\nstdout: %s\nstderr: %s", code, out, lastLines(errOut, 20))
	}
	id := runID(t, errOut)
	t.Cleanup(func() { runFerry(t, "--storage", url, "rollback", "--run", id, "--discard-green-writes") })

	// Green: a notebook starts on the workspace, writes to it and stops; notes changes too.
	notebook := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "notebook"}, Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "notebook", Image: "jupyter", VolumeMounts: []corev1.VolumeMount{{Name: "work", MountPath: "/home/jovyan"}}}},
		Volumes:    []corev1.Volume{{Name: "work", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "workspace"}}}}}}
	if _, err := greenKC.CoreV1().Pods(ns).Create(ctx, notebook, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pvc, err := greenKC.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "workspace", metav1.GetOptions{})
		return err == nil && pvc.Status.Phase == corev1.ClaimBound, nil
	}); err != nil {
		t.Fatalf("green's workspace did not bind for its notebook: %v", err)
	}
	greenFiles := map[string][]byte{"analysis.ipynb": []byte(`{"cells": ["written on green"]}`), "data/results.csv": []byte("x,y\n1,2\n")}
	writeClaimFiles(t, claimFolder(t, greenKC, ns, "workspace"), greenFiles)
	writeClaimFiles(t, claimFolder(t, greenKC, ns, "notes"), map[string][]byte{"a.txt": []byte("green's notes\n")})
	if err := greenKC.CoreV1().Pods(ns).Delete(ctx, "notebook", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}

	code, out, errOut = runFerry(t, "--storage", url, "rollback", "--run", id, "--carry-back", "--lease-ttl", testLeaseTTL.String())
	if code != 0 {
		t.Fatalf("ferry rollback --carry-back exited %d, want 0\nstdout: %s\nstderr: %s", code, out, lastLines(errOut, 20))
	}
	pvc, err := blueKC.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "workspace", metav1.GetOptions{})
	if err != nil || pvc.Spec.VolumeName == "" {
		t.Fatalf("blue's workspace after the carry-back: %v, volume %q; want it bound, holding what green's notebook wrote\nstdout: %s", err, pvc.Spec.VolumeName, out)
	}
	got, want := claimFiles(t, claimFolder(t, blueKC, ns, "workspace")), claimFiles(t, claimFolder(t, greenKC, ns, "workspace"))
	if !maps.Equal(got, want) || got["analysis.ipynb"] == "" {
		t.Errorf("blue's workspace holds\n%v\nwant what green's notebook wrote\n%v", got, want)
	}
	if got := claimFiles(t, notesDir); !maps.Equal(got, claimFiles(t, claimFolder(t, greenKC, ns, "notes"))) {
		t.Errorf("blue's notes hold %v, want green's", got)
	}
	scratch, err := blueKC.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "scratch", metav1.GetOptions{})
	if err != nil || scratch.Spec.VolumeName != "" || scratch.Status.Phase != corev1.ClaimPending {
		t.Errorf("blue's scratch claim after the carry-back: %v, volume %q, %s; want it pending: green's copy was empty", err, scratch.Spec.VolumeName, scratch.Status.Phase)
	}
	if !strings.Contains(out, ns+"/scratch: it had no volume on blue, and green's copy holds nothing") {
		t.Errorf("the carry-back does not say why it left %s/scratch as blue has it:\n%s", ns, out)
	}
}

// TestRestoreRefusesClaimsThatCannotBind: green holds the claim already, made before the restore
// (as GitOps makes an application's claims), of a storage class green lacks (the old cloud's
// gp2): pending, and no volume can ever be made for it. The restore refuses before it applies
// anything, naming the claim and its class, and exits non-zero; none of the backup's objects is
// made. Once the claim is deleted, the restore makes it with the backup's class and its files.
func TestRestoreRefusesClaimsThatCannotBind(t *testing.T) {
	const ns = "unbindable-claims"
	blue, _ := clients(t, "blue")
	kc, greenKC := restoreShapesNamespace(t, ns)
	ctx := context.Background()
	claim := func(class string) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "datasets"},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: ptr.To(class),
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	}
	if _, err := kc.CoreV1().PersistentVolumeClaims(ns).Create(ctx, claim("standard"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dir := dataDir(t, "unbindable-datasets")
	if err := os.WriteFile(filepath.Join(dir, "train.csv"), []byte("x,y\n1,2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := blue.BindClaim(ctx, ns, "datasets", dir); err != nil {
		t.Fatal(err)
	}
	marker := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "marker"}, Data: map[string]string{"from": "blue"}}
	if _, err := kc.CoreV1().ConfigMaps(ns).Create(ctx, marker, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	url := backupMinIO(t, "unbindable-claims")
	if code, out, errOut := runFerry(t, "--storage", url, "backup", "--from", "blue", "-f", namespacesConfig(t, ns), "--name", "unbindable"); code != 0 {
		t.Fatalf("ferry backup exited %d\nstdout: %s\nstderr: %s", code, out, lastLines(errOut, 10))
	}

	createNamespace(t, greenKC, ns, nil)
	if _, err := greenKC.CoreV1().PersistentVolumeClaims(ns).Create(ctx, claim("gp2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	code, rep, errOut := runReportCommand(t, "--storage", url, "restore", "--to", "green", "--backup", "unbindable", "--include-namespaces", ns)
	took := time.Since(start)
	failed := slices.DeleteFunc(slices.Clone(rep.Items), func(it snapshot.ReportItem) bool { return it.Status != snapshot.StatusFailed })
	t.Logf("restore into a claim that cannot bind exited %d in %s: %+v", code, took.Round(time.Millisecond), failed)
	if code == 0 || len(failed) != 1 || failed[0].Name != ns+"/datasets" || !strings.Contains(failed[0].Detail, "storage class gp2 does not exist") {
		t.Errorf("restore into a claim whose class green lacks exited %d, failed %+v; want it refused, naming %s/datasets and gp2\nstderr: %s", code, failed, ns, lastLines(errOut, 10))
	}
	if _, err := greenKC.CoreV1().ConfigMaps(ns).Get(ctx, "marker", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the refused restore made the backup's ConfigMap on green (%v): it applied something", err)
	}

	if err := greenKC.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, "datasets", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := greenKC.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "datasets", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatalf("green's claim is not gone: %v", err)
	}
	if code, rep, errOut := runReportCommand(t, "--storage", url, "restore", "--to", "green", "--backup", "unbindable", "--include-namespaces", ns); code != 0 {
		t.Fatalf("restore once the claim is deleted exited %d: %s %+v\nstderr: %s", code, rep.Error, rep.Items, lastLines(errOut, 10))
	}
	if data, err := os.ReadFile(filepath.Join(claimFolder(t, greenKC, ns, "datasets"), "train.csv")); string(data) != "x,y\n1,2\n" {
		t.Errorf("green's datasets holds %q (%v), want blue's file", data, err)
	}
}

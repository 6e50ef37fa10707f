package integration

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrykube/ferry/integration/testbed"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestNamesAtTheirLimits: Kubernetes names a namespace with up to 63 characters and a claim, a
// ConfigMap or a Secret with up to 253, while a file name (a file storage's, each segment of a
// MinIO key) holds at most 255 bytes, and a path handed to the kernel 4,096. A namespace and a
// claim of the longest names, with the longest file name a claim's filesystem takes and a tree
// deeper than 4,096 bytes inside it, are backed up in every volume format
// (chunks, twice: the second reads the first's tree; tar; tar encrypted, to MinIO) and each
// format restored onto green: green's claim holds blue's files, its
// ConfigMap and Secret of 253 characters are there, and ferry verify passes.
func TestNamesAtTheirLimits(t *testing.T) {
	ns := "limits-" + strings.Repeat("n", 63-len("limits-"))
	claim := "claim." + strings.Repeat("c", 253-len("claim.")-len(".end")) + ".end"
	object := strings.Repeat("o", 253)
	_, greenKC := restoreShapesNamespace(t, ns)
	ctx := context.Background()
	blue, blueKC := clients(t, "blue")
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: claim},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: ptr.To("standard"),
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	if _, err := blueKC.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create claim of %d characters: %v", len(claim), err)
	}
	dir := dataDir(t, "name-limits")
	writeClaimFiles(t, dir, map[string][]byte{
		"notes/" + strings.Repeat("f", 251) + ".txt": []byte("the longest file name\n"),
		"small.txt": []byte("small\n"),
	})
	if err := testbed.DeepTree(filepath.Join(dir, "deep")); err != nil {
		t.Fatal(err)
	}
	if err := blue.BindClaim(ctx, ns, claim, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := blueKC.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: object}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := blueKC.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: object}, StringData: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	id, idFile := newIdentity(t)
	files := "file://" + t.TempDir()
	minio := backupMinIO(t, "name-limits")
	config := namespacesConfig(t, ns)
	for _, b := range []struct {
		store, name string
		args        []string
	}{
		{files, "limits-chunks", nil},
		{files, "limits-chunks-again", nil},
		{files, "limits-tar", []string{"--volume-format", "tar"}},
		{minio, "limits-encrypted", []string{"--encrypt-to", id.Recipient().String()}},
	} {
		args := append([]string{"--storage", b.store, "backup", "--from", "blue", "-f", config, "--name", b.name}, b.args...)
		if code, out, errOut := runFerry(t, args...); code != 0 {
			t.Fatalf("ferry backup --name %s exited %d\nstdout: %s\nstderr: %s", b.name, code, lastLines(out, 30), lastLines(errOut, 30))
		}
	}
	if _, m := readManifest(t, files, "limits-chunks-again"); len(m.Volumes) != 1 || m.Volumes[0].UnchangedFiles != 3 {
		t.Errorf("the second chunked backup's volumes: %+v; want one that took its three files unchanged from the first", m.Volumes)
	}
	want := claimFiles(t, dir)
	if want["deep/"+testbed.DeepLeaf] == "" {
		t.Fatalf("blue's claim lacks the deep tree's leaf (%d entries)", len(want))
	}
	for _, r := range []struct {
		store, name string
		args        []string
	}{
		{files, "limits-chunks-again", nil},
		{files, "limits-tar", nil},
		{minio, "limits-encrypted", []string{"--identity", idFile}},
	} {
		removeNamespace(t, ns, greenKC)
		restore := append([]string{"--storage", r.store, "restore", "--to", "green", "--backup", r.name}, r.args...)
		if code, out, errOut := runFerry(t, restore...); code != 0 {
			t.Fatalf("ferry restore --backup %s exited %d\nstdout: %s\nstderr: %s", r.name, code, lastLines(out, 30), lastLines(errOut, 30))
		}
		if got := claimFiles(t, claimFolder(t, greenKC, ns, claim)); !equalMaps(got, want) {
			t.Errorf("after the restore of %s green's claim holds %v, blue's %v", r.name, got, want)
		}
		if _, err := greenKC.CoreV1().ConfigMaps(ns).Get(ctx, object, metav1.GetOptions{}); err != nil {
			t.Errorf("after the restore of %s: ConfigMap of %d characters: %v", r.name, len(object), err)
		}
		if _, err := greenKC.CoreV1().Secrets(ns).Get(ctx, object, metav1.GetOptions{}); err != nil {
			t.Errorf("after the restore of %s: Secret of %d characters: %v", r.name, len(object), err)
		}
		verify := append([]string{"--storage", r.store, "verify", "--to", "green", "--backup", r.name}, r.args...)
		if code, out, errOut := runFerry(t, verify...); code != 0 {
			t.Errorf("ferry verify --backup %s exited %d\nstdout: %s\nstderr: %s", r.name, code, lastLines(out, 30), lastLines(errOut, 30))
		}
	}
}

package integration

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/storage"
	"github.com/sirupsen/logrus"
	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	"github.com/vmware-tanzu/velero/pkg/archive"
	"github.com/vmware-tanzu/velero/pkg/persistence"
	"github.com/vmware-tanzu/velero/pkg/plugin/velero"
	"github.com/vmware-tanzu/velero/pkg/util/filesystem"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// veleroStore is Velero's object store plugin interface over a ferry storage backend, so that
// Velero's own persistence code reads what ferry wrote, as a Velero server pointed at the same
// bucket would.
type veleroStore struct{ backend storage.Backend }

func (s veleroStore) GetObjectStore(string) (velero.ObjectStore, error) { return s, nil }
func (s veleroStore) Init(map[string]string) error                      { return nil }
func (s veleroStore) PutObject(_, key string, body io.Reader) error {
	return s.backend.Put(context.Background(), key, body)
}
func (s veleroStore) ObjectExists(_, key string) (bool, error) {
	_, err := s.backend.Stat(context.Background(), key)
	if errors.Is(err, storage.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}
func (s veleroStore) GetObject(_, key string) (io.ReadCloser, error) {
	return s.backend.Get(context.Background(), key)
}
func (s veleroStore) ListCommonPrefixes(_, prefix, delimiter string) ([]string, error) {
	seen := map[string]bool{}
	err := s.backend.List(context.Background(), prefix, func(o storage.ObjectInfo) error {
		if rest := strings.TrimPrefix(o.Key, prefix); strings.Contains(rest, delimiter) {
			seen[prefix+rest[:strings.Index(rest, delimiter)+len(delimiter)]] = true
		}
		return nil
	})
	var out []string
	for p := range seen {
		out = append(out, p)
	}
	sort.Strings(out)
	return out, err
}
func (s veleroStore) ListObjects(_, prefix string) ([]string, error) {
	var out []string
	err := s.backend.List(context.Background(), prefix, func(o storage.ObjectInfo) error { out = append(out, o.Key); return nil })
	return out, err
}
func (s veleroStore) DeleteObject(_, key string) error {
	return s.backend.Delete(context.Background(), key)
}
func (s veleroStore) CreateSignedURL(string, string, time.Duration) (string, error) {
	return "", errors.New("not supported")
}

// TestVeleroReadsFerryBackup opens a backup of blue with Velero's persistence and archive packages
// (docs/format.md, Velero compatibility) and finds every object of ferry's manifest.
func TestVeleroReadsFerryBackup(t *testing.T) {
	applyPlatform(t)
	dir := t.TempDir()
	if code, out, errOut := runFerry(t, "--storage", "file://"+dir, "backup", "--from", "blue", "--preset", "kubeflow", "--name", "for-velero"); code != 0 && code != 3 {
		t.Fatalf("ferry backup exited %d\n%s\n%s", code, out, errOut)
	}
	store, m := readManifest(t, "file://"+dir, "for-velero")

	log := logrus.New()
	bsl := &velerov1.BackupStorageLocation{Spec: velerov1.BackupStorageLocationSpec{
		Provider:    "ferry-test",
		StorageType: velerov1.StorageType{ObjectStorage: &velerov1.ObjectStorageLocation{Bucket: "backups"}},
	}}
	bs, err := persistence.NewObjectBackupStoreGetter(nil).Get(bsl, veleroStore{store}, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := bs.IsValid(); err != nil {
		t.Fatalf("Velero finds the storage invalid: %v", err)
	}
	names, err := bs.ListBackups()
	if err != nil || len(names) != 1 || names[0] != "for-velero" {
		t.Fatalf("Velero lists %v (%v)", names, err)
	}
	if ok, err := bs.BackupExists("backups", "for-velero"); !ok || err != nil {
		t.Fatalf("Velero: backup exists = %v (%v)", ok, err)
	}
	meta, err := bs.GetBackupMetadata("for-velero")
	if err != nil || meta.Name != "for-velero" || meta.Status.Phase != velerov1.BackupPhaseCompleted || meta.Status.FormatVersion != "1.1.0" {
		t.Fatalf("Velero reads the metadata as %+v (%v)", meta, err)
	}
	contents, err := bs.GetBackupContents("for-velero")
	if err != nil {
		t.Fatal(err)
	}
	defer contents.Close()
	fs := filesystem.NewFileSystem()
	extracted, err := archive.NewExtractor(log, fs).UnzipAndExtractBackup(contents)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.RemoveAll(extracted)
	resources, err := archive.NewParser(log, fs).Parse(extracted)
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for gr, items := range resources {
		for ns, names := range items.ItemsByNamespace {
			for _, name := range names {
				found[path.Join(gr, ns, name)] = true
			}
		}
	}
	for _, o := range m.Objects {
		gr := strings.TrimSuffix(o.Resource+"."+o.Group, ".")
		if !found[path.Join(gr, o.Namespace, o.Name)] {
			t.Errorf("Velero does not find %s %s/%s", gr, o.Namespace, o.Name)
		}
	}
	if len(found) != len(m.Objects) {
		t.Errorf("Velero finds %d objects, the manifest lists %d", len(found), len(m.Objects))
	}
	t.Logf("Velero found all %d objects", len(found))
}

// TestRestoreReadsAVeleroBackup writes a backup the way Velero stores one — its archive layout
// (format 1.1.0, version-less and preferred-version trees) of live objects of blue, uploaded with
// Velero's own persistence package and no ferry manifest — and restores it with ferry onto the
// fresh cluster: the objects come back and verify finds them identical, with exit 0, as the backup
// holds no volume data; the same backup with a pod volume backup (data Velero keeps in Kopia)
// reports that volume as not restored, by name, not silently ignored.
func TestRestoreReadsAVeleroBackup(t *testing.T) {
	applyPlatform(t)
	_, dr := fresh(t)
	ctx := context.Background()
	_, blue := clients(t, "blue")
	ns := "velero-made"
	if _, err := blue.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "web"}
	objects := []runtimeObject{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: ns}, Data: map[string]string{"mode": "production", "greeting": "grüße ✓ 日本語"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "token", Namespace: ns}, Data: map[string][]byte{"key": []byte("s3cr3t")}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}, Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Port: 80}}}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}, Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				ServiceAccountName: "web", Containers: []corev1.Container{{Name: "web", Image: "nginx:1.27"}}}},
		}},
	}
	_, dyn, _ := planClients(t, "blue")
	for _, o := range objects {
		if err := createTyped(ctx, blue, o); err != nil {
			t.Fatal(err)
		}
	}
	runningPod(t, blue, ns, "app=web")

	// Velero's archive of everything in the namespace, as live objects (status and all).
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	add := func(name string, data []byte) {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(data)), Typeflag: tar.TypeReg, ModTime: time.Now()}); err != nil {
			t.Fatal(err)
		}
		tw.Write(data)
	}
	add("metadata/version", []byte("1.1.0\n"))
	count := 0
	for _, r := range []struct {
		gvr  schema.GroupVersionResource
		kind string
	}{
		{schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, "Namespace"},
		{schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "ConfigMap"},
		{schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, "Secret"},
		{schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}, "ServiceAccount"},
		{schema.GroupVersionResource{Version: "v1", Resource: "services"}, "Service"},
		{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, "Deployment"},
		{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "replicasets"}, "ReplicaSet"},
		{schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "Pod"},
	} {
		var list *unstructured.UnstructuredList
		var err error
		if r.kind == "Namespace" {
			var one *unstructured.Unstructured
			if one, err = dyn.Resource(r.gvr).Get(ctx, ns, metav1.GetOptions{}); err == nil {
				list = &unstructured.UnstructuredList{Items: []unstructured.Unstructured{*one}}
			}
		} else {
			list, err = dyn.Resource(r.gvr).Namespace(ns).List(ctx, metav1.ListOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
		gr := r.gvr.GroupResource().String()
		for _, o := range list.Items {
			if o.GetName() == "kube-root-ca.crt" || o.GetName() == "default" {
				continue // Velero would carry them; ferry's plan leaves them, so does this backup
			}
			o.SetAPIVersion(r.gvr.GroupVersion().String())
			o.SetKind(r.kind)
			data, err := json.Marshal(o.Object)
			if err != nil {
				t.Fatal(err)
			}
			scope := path.Join("namespaces", o.GetNamespace())
			if r.kind == "Namespace" {
				scope = "cluster"
			}
			add(path.Join("resources", gr, scope, o.GetName()+".json"), data)
			add(path.Join("resources", gr, r.gvr.Version+"-preferredversion", scope, o.GetName()+".json"), data)
			count++
		}
	}
	// Velero's backups hold kube-system whatever they name: what runs there is the cluster's own.
	ownDNS, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "velero-made-dns", "namespace": "kube-system"}, "data": map[string]any{"Corefile": ".:53 { forward . 10.9.0.53 }"}})
	add("resources/configmaps/namespaces/kube-system/velero-made-dns.json", ownDNS)
	add("resources/configmaps/v1-preferredversion/namespaces/kube-system/velero-made-dns.json", ownDNS)
	tw.Close()
	gz.Close()

	dir := t.TempDir()
	store, err := storage.Open(ctx, "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	bs, err := persistence.NewObjectBackupStoreGetter(nil).Get(&velerov1.BackupStorageLocation{Spec: velerov1.BackupStorageLocationSpec{
		Provider: "ferry-test", StorageType: velerov1.StorageType{ObjectStorage: &velerov1.ObjectStorageLocation{Bucket: "backups"}},
	}}, veleroStore{store}, logrus.New())
	if err != nil {
		t.Fatal(err)
	}
	archive := buf.Bytes()
	now := metav1.Now()
	put := func(name string, pvbs []velerov1.PodVolumeBackup) {
		t.Helper()
		meta, _ := json.Marshal(velerov1.Backup{
			TypeMeta:   metav1.TypeMeta{APIVersion: "velero.io/v1", Kind: "Backup"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "velero"},
			Spec:       velerov1.BackupSpec{IncludedNamespaces: []string{ns}},
			Status:     velerov1.BackupStatus{Version: 1, FormatVersion: "1.1.0", Phase: velerov1.BackupPhaseCompleted, StartTimestamp: &now, CompletionTimestamp: &now},
		})
		info := persistence.BackupInfo{Name: name, Metadata: bytes.NewReader(meta), Contents: bytes.NewReader(archive), Log: bytes.NewReader(nil)}
		if pvbs != nil {
			var pvb bytes.Buffer // gzip-JSON, as Velero's encode.ToJSONGzip writes it
			zw := gzip.NewWriter(&pvb)
			json.NewEncoder(zw).Encode(pvbs)
			zw.Close()
			info.PodVolumeBackups = &pvb
		}
		if err := bs.PutBackup(info); err != nil {
			t.Fatal(err)
		}
	}
	put("velero-made", nil)

	// No pod volume backups or snapshots: nothing is skipped, and every object restored is exit 0.
	url := "file://" + dir
	code, rep, errOut := runReportCommand(t, "--storage", url, "restore", "--to", "dr", "--backup", "velero-made")
	if rep.Counts["objects"][snapshot.StatusFailed] != 0 || rep.Counts["objects"][snapshot.StatusRestored] == 0 {
		t.Fatalf("restore of a Velero backup exited %d: %v %+v\nstderr: %s", code, rep.Counts, rep.Items, errOut)
	}
	t.Logf("restore of Velero's %d objects: exit %d, %v", count, code, rep.Counts)
	if code != 0 || len(rep.Items) != 0 {
		t.Errorf("the restore of a Velero backup without volume data should exit 0 and skip nothing: exit %d, %+v", code, rep.Items)
	}
	if _, err := dr.CoreV1().ConfigMaps("kube-system").Get(ctx, "velero-made-dns", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the Velero backup's kube-system ConfigMap was restored (get: %v); want it left, as the cluster's own", err)
	}
	if left := rep.Counts["objects"][snapshot.StatusLeft]; left != 1 {
		t.Errorf("the restore's report counts %d objects left, want the one of kube-system: %v", left, rep.Counts)
	}
	cm, err := dr.CoreV1().ConfigMaps(ns).Get(ctx, "settings", metav1.GetOptions{})
	if err != nil || cm.Data["greeting"] != "grüße ✓ 日本語" {
		t.Fatalf("the ConfigMap on the fresh cluster: %+v (%v)", cm, err)
	}
	code, rep, _ = runReportCommand(t, "--storage", url, "verify", "--to", "dr", "--backup", "velero-made")
	if code != 0 || len(rep.Items) != 0 {
		t.Errorf("verify of a Velero backup without volume data should exit 0: exit %d, %+v", code, rep.Items)
	}
	if rep.Counts["objects"][snapshot.StatusIdentical]+rep.Counts["objects"][snapshot.StatusRecreated] != count {
		t.Errorf("verify should account for all %d objects: %v", count, rep.Counts)
	}
	if rep.Counts["health"][snapshot.StatusHealthy] == 0 {
		t.Errorf("the restored Deployment should be healthy: %v", rep.Counts)
	}
	// Named, it is restored.
	t.Cleanup(func() {
		if err := dr.CoreV1().ConfigMaps("kube-system").Delete(context.Background(), "velero-made-dns", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Logf("clean up kube-system/velero-made-dns: %v", err)
		}
	})
	if code, rep, errOut := runReportCommand(t, "--storage", url, "restore", "--to", "dr", "--backup", "velero-made", "--include-namespaces", ns+",kube-system"); code != 0 {
		t.Errorf("restore naming kube-system exited %d: %+v\n%s", code, rep.Items, lastLines(errOut, 5))
	}
	if _, err := dr.CoreV1().ConfigMaps("kube-system").Get(ctx, "velero-made-dns", metav1.GetOptions{}); err != nil {
		t.Errorf("the Velero backup's kube-system ConfigMap, named: %v", err)
	}

	// The same objects with a pod volume backup of the web pod's volume: Velero keeps its data in
	// Kopia, which ferry does not read, so that volume is skipped, by name, and verify exits 3.
	// One of a kube-system pod's is left with that pod, unnamed.
	web := runningPod(t, blue, ns, "app=web")
	pvb := func(name, namespace, pod string) velerov1.PodVolumeBackup {
		return velerov1.PodVolumeBackup{
			TypeMeta:   metav1.TypeMeta{APIVersion: "velero.io/v1", Kind: "PodVolumeBackup"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "velero"},
			Spec: velerov1.PodVolumeBackupSpec{Volume: "data", UploaderType: "kopia",
				Pod: corev1.ObjectReference{Kind: "Pod", Namespace: namespace, Name: pod}},
			Status: velerov1.PodVolumeBackupStatus{Phase: velerov1.PodVolumeBackupPhaseCompleted},
		}
	}
	put("velero-pvb", []velerov1.PodVolumeBackup{pvb("velero-pvb-x1", ns, web), pvb("velero-pvb-x2", "kube-system", "csi-node-x7k2p")})
	code, rep, _ = runReportCommand(t, "--storage", url, "verify", "--to", "dr", "--backup", "velero-pvb")
	wantOnly(t, code, rep, snapshot.ReportItem{Kind: "volumes", Status: snapshot.StatusSkipped, Name: ns + "/" + web + " volume data"})
}

type runtimeObject interface{ GetName() string }

// createTyped creates one of a few typed objects on a cluster.
func createTyped(ctx context.Context, kc kubernetes.Interface, o runtimeObject) error {
	var err error
	switch v := o.(type) {
	case *corev1.ConfigMap:
		_, err = kc.CoreV1().ConfigMaps(v.Namespace).Create(ctx, v, metav1.CreateOptions{})
	case *corev1.Secret:
		_, err = kc.CoreV1().Secrets(v.Namespace).Create(ctx, v, metav1.CreateOptions{})
	case *corev1.ServiceAccount:
		_, err = kc.CoreV1().ServiceAccounts(v.Namespace).Create(ctx, v, metav1.CreateOptions{})
	case *corev1.Service:
		_, err = kc.CoreV1().Services(v.Namespace).Create(ctx, v, metav1.CreateOptions{})
	case *appsv1.Deployment:
		_, err = kc.AppsV1().Deployments(v.Namespace).Create(ctx, v, metav1.CreateOptions{})
	default:
		return fmt.Errorf("createTyped: %T", o)
	}
	return err
}

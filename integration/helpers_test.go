package integration

import (
	"cmp"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/storage"
	"github.com/klauspost/compress/zstd"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// envCount is a positive whole number from the environment variable name, else def: the size a
// test runs at in `make test`, which the full figure (given in README.md) can replace.
func envCount(t testing.TB, name string, def int) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a whole number above 0", name, s)
	}
	return n
}

// removeClustersAfter removes the clusters named, when they run, once t and its subtests end: the
// clusters a test added for itself alone (testbed.RemoveCluster says why).
func removeClustersAfter(t testing.TB, names ...string) {
	t.Cleanup(func() {
		for _, name := range names {
			if err := tb.RemoveCluster(context.Background(), name); err != nil {
				t.Error(err)
			}
		}
	})
}

// testLeaseTTL is the lease of the runs tests start and kill: short, so a killed run's lease expires
// soon, and long enough that a loaded machine's slow renewal does not cost a live run its lease
// (a renewal that fails for two thirds of it stops the run).
const testLeaseTTL = 6 * time.Second

// regexpLine reports whether some line of text matches pattern.
func regexpLine(text, pattern string) bool {
	return regexp.MustCompile(`(?m)^` + pattern).MatchString(text)
}

// dataDir is a folder that lives as long as the package's testbed: claims bound to it stay
// readable for the tests that follow.
func dataDir(t testing.TB, name string) string {
	t.Helper()
	dir, err := tb.DataDir(name)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// backupMinIO returns the URL of a folder in the testbed's backup MinIO, with its credentials in
// the AWS environment variables for the rest of the test, as a user would set them.
func backupMinIO(t testing.TB, folder string) string {
	t.Helper()
	minio := tb.MinIO["backup"]
	if err := minio.CreateBucket(context.Background(), "backups"); err != nil {
		t.Fatal(err)
	}
	for _, kv := range minio.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	return "s3://backups/" + folder + "?endpoint=" + minio.Endpoint + "&path-style=true"
}

// readManifest opens storage and reads a backup's manifest.
func readManifest(t testing.TB, url, backup string) (storage.Backend, *snapshot.Manifest) {
	t.Helper()
	ctx := context.Background()
	store, err := storage.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	m, err := snapshot.ReadManifest(ctx, store, backup)
	if err != nil {
		t.Fatal(err)
	}
	return store, m
}

// wantBackupExit reads backup's manifest and fails the test unless the backup command's exit code
// says what the manifest holds: 3 when it skipped items (listed under NOT IN THIS BACKUP), else
// 0. A claim that never had a volume holds no data: the platform's workspaces are skipped
// only once bound to a folder that cannot be read.
func wantBackupExit(t testing.TB, url, backup string, code int, out, errOut string) (storage.Backend, *snapshot.Manifest) {
	t.Helper()
	store, m := readManifest(t, url, backup)
	want := 0
	if len(m.Skipped) > 0 {
		want = 3
	}
	if code != want || strings.Contains(out, "NOT IN THIS BACKUP") != (want == 3) {
		t.Fatalf("ferry backup %s exited %d, want %d: it skipped %+v\nstdout: %s\nstderr: %s", backup, code, want, m.Skipped, out, errOut)
	}
	return store, m
}

// volumeFiles reads a volume's files from a backup as restore and verify do: its file list
// stream (format 4), checked against the manifest and decrypted with ids, or the manifest's own
// list (format 3 and older).
func volumeFiles(t *testing.T, store storage.Backend, backup string, v snapshot.Volume, ids ...age.Identity) []snapshot.File {
	t.Helper()
	ctx := context.Background()
	r, err := snapshot.Open(ctx, store, backup, ids)
	if err != nil {
		t.Fatal(err)
	}
	var out []snapshot.File
	if err := r.VolumeFiles(ctx, v, func(f snapshot.File) error { out = append(out, f); return nil }); err != nil {
		t.Fatalf("the files of volume %s/%s: %v", v.Namespace, v.Name, err)
	}
	return out
}

// runningPod waits for a running pod matching the label selector and returns its name.
func runningPod(t testing.TB, kc kubernetes.Interface, namespace, selector string) string {
	t.Helper()
	var pod string
	waitUntil(t, "a running pod with "+selector+" in "+namespace, 60*time.Second, func(ctx context.Context) (bool, error) {
		pods, err := kc.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				pod = p.Name
				return true, nil
			}
		}
		return false, nil
	})
	return pod
}

// readStored reads a file of a backup as it was before ferry stored it: decrypted with id when
// given, and decompressed by its name's .zst or .gz.
func readStored(t *testing.T, store storage.Backend, backup, file string, id age.Identity) []byte {
	t.Helper()
	rc, err := store.Get(context.Background(), snapshot.Prefix(backup)+file)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var r io.Reader = rc
	if id != nil {
		if r, err = age.Decrypt(r, id); err != nil {
			t.Fatalf("decrypt %s: %v", file, err)
		}
	}
	switch name := strings.TrimSuffix(file, snapshot.EncryptedSuffix); {
	case strings.HasSuffix(name, ".zst"):
		dec, err := zstd.NewReader(r)
		if err != nil {
			t.Fatal(err)
		}
		defer dec.Close()
		r = dec
	case strings.HasSuffix(name, ".gz"):
		if r, err = gzip.NewReader(r); err != nil {
			t.Fatal(err)
		}
	}
	data, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read %s: %v", file, err)
	}
	return data
}

// removeNamespace deletes namespace from each cluster, with the volumes bound to its claims (they
// outlive it), and waits until it is gone: later tests back up, plan and restore all of blue, and
// a namespace still terminating refuses their mover pods, a volume left behind is backed up again.
func removeNamespace(t *testing.T, namespace string, kcs ...kubernetes.Interface) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, kc := range kcs {
		if err := kc.CoreV1().Namespaces().Delete(ctx, namespace, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Logf("clean up namespace %s: %v", namespace, err)
		}
		pvs, err := kc.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Logf("clean up the volumes of namespace %s: %v", namespace, err)
			continue
		}
		for _, pv := range pvs.Items {
			if pv.Spec.ClaimRef != nil && pv.Spec.ClaimRef.Namespace == namespace {
				if err := kc.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					t.Logf("clean up volume %s: %v", pv.Name, err)
				}
			}
		}
	}
	for _, kc := range kcs {
		err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			_, err := kc.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			t.Errorf("namespace %s is still there after the test: later tests would meet it", namespace)
		}
	}
}

// removeAfter removes namespace from each cluster (removeNamespace) when the test ends.
func removeAfter(t *testing.T, namespace string, kcs ...kubernetes.Interface) {
	t.Cleanup(func() { removeNamespace(t, namespace, kcs...) })
}

// namespacesConfig writes a ferry.yaml that includes only the namespaces given, and returns its path.
func namespacesConfig(t testing.TB, namespaces ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ferry.yaml")
	if err := os.WriteFile(path, []byte("include: {namespaces: ["+strings.Join(namespaces, ", ")+"]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// moveNamespace backs up namespace from blue into a new file store as the backup name and
// restores it onto green, failing the test unless both exit 0; it returns the store's URL.
func moveNamespace(t *testing.T, namespace, name string) string {
	t.Helper()
	store := "file://" + filepath.Join(t.TempDir(), "store")
	if code, out, errOut := runFerry(t, "--storage", store, "backup", "--from", "blue", "-f", namespacesConfig(t, namespace), "--name", name); code != 0 {
		t.Fatalf("ferry backup exited %d\n%s\n%s", code, out, errOut)
	}
	if code, rep, errOut := runReportCommand(t, "--storage", store, "restore", "--to", "green", "--backup", name); code != 0 {
		t.Fatalf("restore exited %d: %s %+v\nstderr: %s", code, rep.Error, rep.Items, errOut)
	}
	return store
}

// testCRD is a custom resource type of one version that keeps any field: namespaced unless
// cluster, of version v1 unless version says, its plural its kind in lower case with an s unless
// pluralName says.
type testCRD struct {
	group, kind string
	// statusSubresource: its status is written through the subresource, not with the object.
	statusSubresource   bool
	cluster             bool
	version, pluralName string
}

func (c testCRD) plural() string {
	if c.pluralName != "" {
		return c.pluralName
	}
	return strings.ToLower(c.kind) + "s"
}

func (c testCRD) name() string { return c.plural() + "." + c.group }

// gvr is the type's resource.
func (c testCRD) gvr() schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: c.group, Version: cmp.Or(c.version, "v1"), Resource: c.plural()}
}

func (c testCRD) manifest() string {
	subresources, scope := "", "Namespaced"
	if c.statusSubresource {
		subresources = "\n    subresources: {status: {}}"
	}
	if c.cluster {
		scope = "Cluster"
	}
	return fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: %s}
spec:
  group: %s
  scope: %s
  names: {plural: %s, singular: %s, kind: %s, listKind: %sList}
  versions:
  - name: %s
    served: true
    storage: true%s
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`, c.name(), c.group, scope, c.plural(), strings.ToLower(c.kind), c.kind, c.kind, cmp.Or(c.version, "v1"), subresources)
}

// installCRDs applies the CRDs to blue and green, as a platform installed on each has them, waits
// until they are Established, and removes them after the test.
func installCRDs(t *testing.T, crds ...testCRD) {
	t.Helper()
	var manifests, names, established []string
	for _, c := range crds {
		manifests = append(manifests, c.manifest())
		names = append(names, c.name())
		established = append(established, "crd/"+c.name())
	}
	for _, cluster := range []string{"blue", "green"} {
		kubectl(t, cluster, strings.Join(manifests, "---\n"), "apply", "-f", "-")
		t.Cleanup(func() {
			kubectl(t, cluster, "", append(append([]string{"delete", "crd"}, names...), "--ignore-not-found", "--wait")...)
		})
		kubectl(t, cluster, "", append(append([]string{"wait", "--for=condition=Established"}, established...), "--timeout=60s")...)
	}
}

// newIdentity makes an age identity and writes it to a file, as --identity reads it.
func newIdentity(t *testing.T) (*age.X25519Identity, string) {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "identity.txt")
	if err := os.WriteFile(file, []byte(id.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return id, file
}

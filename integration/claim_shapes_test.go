package integration

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/integration/testbed"
	"github.com/ferrykube/ferry/snapshot"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// TestClaimsMadeFromDataSourcesRestore: on blue, claims were first filled from a data source, as
// platforms do: one restored from a VolumeSnapshot, one filled by a volume populator (a
// dataSourceRef to a custom object), one a clone of another claim, since written to. Their
// contents move as files; the source says how blue first filled a claim, and green has neither
// the snapshot nor the populator (its provisioner leaves such a claim pending, as a CSI
// provisioner does). A restore onto green must bind every claim and fill it exactly as blue's
// (read independently, file by file), the clone without its source's files it had deleted; and
// verify finds nothing different. The VolumeSnapshot and its content, of blue's storage, stay in
// the backup and are not made on green (the restore says it skipped the snapshot).
func TestClaimsMadeFromDataSourcesRestore(t *testing.T) {
	const ns = "claim-sources"
	_, greenKC := restoreShapesNamespace(t, ns)
	blue, _ := clients(t, "blue")
	green, _ := clients(t, "green")
	ctx := context.Background()
	snapshotCRDs(t, blue, green)
	snapshots := schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshots"}
	contents := schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshotcontents"}
	_, blueDC, err := blue.Clients()
	if err != nil {
		t.Fatal(err)
	}
	content := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotContent",
		"metadata": map[string]any{"name": "snapcontent-nightly"},
		"spec": map[string]any{"deletionPolicy": "Delete", "driver": "ebs.csi.aws.com", "source": map[string]any{"snapshotHandle": "snap-0123456789abcdef0"},
			"volumeSnapshotRef": map[string]any{"namespace": ns, "name": "nightly"}}}}
	snap := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
		"metadata": map[string]any{"name": "nightly", "namespace": ns},
		"spec":     map[string]any{"source": map[string]any{"volumeSnapshotContentName": "snapcontent-nightly"}}}}
	waitUntil(t, "the snapshot API served on blue", time.Minute, func(ctx context.Context) (bool, error) {
		_, err := blueDC.Resource(contents).Create(ctx, content, metav1.CreateOptions{})
		return err == nil || apierrors.IsAlreadyExists(err), nil
	})
	t.Cleanup(func() {
		blueDC.Resource(contents).Delete(context.Background(), "snapcontent-nightly", metav1.DeleteOptions{})
	})
	if _, err := blueDC.Resource(snapshots).Namespace(ns).Create(ctx, snap, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	snapshotGroup, datasetGroup := "snapshot.storage.k8s.io", "datasets.example.dev"
	claims := []struct {
		name   string
		source *corev1.TypedLocalObjectReference
		ref    *corev1.TypedObjectReference
		files  map[string][]byte
	}{
		{name: "base", files: map[string][]byte{"shared/a.txt": []byte("base a\n"), "shared/gone.txt": []byte("deleted in the clone\n")}},
		{name: "from-snapshot", source: &corev1.TypedLocalObjectReference{APIGroup: &snapshotGroup, Kind: "VolumeSnapshot", Name: "nightly"},
			files: map[string][]byte{"db/pages.bin": []byte("restored from the nightly snapshot, written since\n")}},
		{name: "populated", ref: &corev1.TypedObjectReference{APIGroup: &datasetGroup, Kind: "Dataset", Name: "mnist"},
			files: map[string][]byte{"mnist/train.idx": []byte("filled by the populator\n")}},
		{name: "clone", source: &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "base"},
			files: map[string][]byte{"shared/a.txt": []byte("base a, changed in the clone\n"), "own.txt": []byte("the clone's own\n")}},
	}
	dirs := map[string]string{}
	for _, c := range claims {
		dirs[c.name] = blueClaim(t, ns, c.name, c.files, func(s *corev1.PersistentVolumeClaimSpec) { s.DataSource, s.DataSourceRef = c.source, c.ref })
	}

	store := "file://" + t.TempDir()
	config := namespacesConfig(t, ns)
	if code, out, errOut := runFerry(t, "--storage", store, "backup", "--from", "blue", "-f", config, "--name", "sources"); code != 0 {
		t.Fatalf("ferry backup exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	start := time.Now()
	code, rep, errOut := runReportCommand(t, "--storage", store, "restore", "--to", "green", "--backup", "sources")
	t.Logf("restore: exit %d in %s, %v", code, time.Since(start).Round(time.Second), rep.Counts)
	// Exit 3: the snapshot and its content are skipped, and said so; nothing else is.
	skipped := map[string]bool{}
	for _, it := range rep.Items {
		skipped[it.Status+" "+it.Name] = true
	}
	if want := map[string]bool{
		snapshot.StatusSkipped + " snapshot.storage.k8s.io/v1 VolumeSnapshot " + ns + "/nightly":         true,
		snapshot.StatusSkipped + " snapshot.storage.k8s.io/v1 VolumeSnapshotContent snapcontent-nightly": true,
	}; code != 3 || rep.Error != "" || !maps.Equal(skipped, want) {
		t.Fatalf("ferry restore exited %d (%s), listing %v; want 3, listing only %v\nstderr: %s", code, rep.Error, rep.Items, want, errOut)
	}
	_, greenDC, err := green.Clients()
	if err != nil {
		t.Fatal(err)
	}
	if list, err := greenDC.Resource(snapshots).Namespace(ns).List(ctx, metav1.ListOptions{}); err == nil && len(list.Items) > 0 {
		t.Errorf("green has %d VolumeSnapshots in %s, want none", len(list.Items), ns)
	}
	if list, err := greenDC.Resource(contents).List(ctx, metav1.ListOptions{}); err == nil && len(list.Items) > 0 {
		t.Errorf("green has %d VolumeSnapshotContents, want none: blue's storage is not green's", len(list.Items))
	}
	for _, c := range claims {
		if got, want := claimFiles(t, claimFolder(t, greenKC, ns, c.name)), claimFiles(t, dirs[c.name]); !equalMaps(got, want) {
			t.Errorf("green's claim %s holds %v, blue's %v", c.name, got, want)
		}
	}
	// The skipped snapshot is no difference: verify compares what a restore makes.
	if code, out, errOut := runFerry(t, "--storage", store, "verify", "--to", "green", "--backup", "sources"); code != 0 {
		t.Errorf("ferry verify exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
}

// snapshotCRDs installs the snapshot API (testdata/volumesnapshot-crds.yaml) on the first cluster,
// and removes it from all of them after the test: other tests back up the whole cluster.
func snapshotCRDs(t *testing.T, on *testbed.Cluster, also ...*testbed.Cluster) {
	t.Helper()
	ctx := context.Background()
	if err := on.Apply(ctx, io.Discard, filepath.Join(repoDir(), "integration", "testdata", "volumesnapshot-crds.yaml")); err != nil {
		t.Fatal(err)
	}
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	t.Cleanup(func() {
		for _, c := range append([]*testbed.Cluster{on}, also...) {
			_, dc, err := c.Clients()
			if err != nil {
				t.Log(err)
				continue
			}
			for _, name := range []string{"volumesnapshots.snapshot.storage.k8s.io", "volumesnapshotcontents.snapshot.storage.k8s.io"} {
				if err := dc.Resource(crds).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					t.Logf("remove CRD %s from %s: %v", name, c.Name, err)
				}
			}
		}
	})
}

// TestBlockClaimsAreSkippedAndSaid: a claim of volumeMode Block is a raw device, which a kubelet
// does not mount as a filesystem (the testbed leaves such a mover without exec), and ferry moves
// files. The plan warns of it, the backup skips its data at once (exit 3, the reason in the
// manifest) and backs up the namespace's other claim, and a restore makes the claim on green and
// says its data is not in the backup.
func TestBlockClaimsAreSkippedAndSaid(t *testing.T) {
	const ns = "claim-block"
	_, greenKC := restoreShapesNamespace(t, ns)
	ctx := context.Background()
	dirs := map[string]string{}
	for name, mode := range map[string]corev1.PersistentVolumeMode{"raw": corev1.PersistentVolumeBlock, "files": corev1.PersistentVolumeFilesystem} {
		dirs[name] = blueClaim(t, ns, name, map[string][]byte{"data.txt": []byte(name + "\n")}, func(s *corev1.PersistentVolumeClaimSpec) { s.VolumeMode = &mode })
	}
	config := namespacesConfig(t, ns)
	const why = "a raw block volume: ferry moves files, not devices"
	if code, out, errOut := runFerry(t, "plan", "--from", "blue", "-f", config); code != 0 || !regexpLine(out, `warning\s+claim `+ns+`/raw\s+`+why) {
		t.Errorf("ferry plan exited %d, want 0 and a warning for %s/raw\nstdout: %s\nstderr: %s", code, ns, out, errOut)
	}
	store := "file://" + t.TempDir()
	start := time.Now()
	code, out, errOut := runFerry(t, "--storage", store, "backup", "--from", "blue", "-f", config, "--name", "block")
	t.Logf("backup: exit %d in %s", code, time.Since(start).Round(100*time.Millisecond))
	if code != 3 {
		t.Fatalf("ferry backup exited %d, want 3 (an item skipped)\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if strings.Contains(errOut, "claim="+ns+"/raw") {
		t.Errorf("a mover pod was made for the block claim:\n%s", errOut)
	}
	_, m := readManifest(t, store, "block")
	if !slices.ContainsFunc(m.Skipped, func(s snapshot.Skipped) bool {
		return s.Kind == "volume" && s.Name == ns+"/raw" && strings.HasPrefix(s.Reason, why)
	}) || !slices.ContainsFunc(m.Volumes, func(v snapshot.Volume) bool { return v.Namespace == ns && v.Name == "files" }) {
		t.Fatalf("the backup should skip %s/raw, saying why, and hold %s/files: skipped %+v, volumes %+v", ns, ns, m.Skipped, m.Volumes)
	}

	code, rep, errOut := runReportCommand(t, "--storage", store, "restore", "--to", "green", "--backup", "block")
	if code != 3 || rep.Error != "" || rep.Counts["volumes"][snapshot.StatusFailed] > 0 || !slices.ContainsFunc(rep.Items, func(it snapshot.ReportItem) bool {
		return it.Kind == "volumes" && it.Status == snapshot.StatusSkipped && it.Name == ns+"/raw" && strings.Contains(it.Detail, why)
	}) {
		t.Fatalf("ferry restore exited %d (%s), %v %+v; want 3, the block claim's data skipped and said\nstderr: %s", code, rep.Error, rep.Counts, rep.Items, errOut)
	}
	pvc, err := greenKC.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "raw", metav1.GetOptions{})
	if err != nil || pvc.Spec.VolumeMode == nil || *pvc.Spec.VolumeMode != corev1.PersistentVolumeBlock {
		t.Errorf("green's claim %s/raw: %v, %v; want a block-mode claim", ns, pvc, err)
	}
	if got, want := claimFiles(t, claimFolder(t, greenKC, ns, "files")), claimFiles(t, dirs["files"]); !equalMaps(got, want) {
		t.Errorf("green's claim files holds %v, blue's %v", got, want)
	}
}

// TestPlanWarnsOfDataOnNodes: a Deployment whose pods keep their data in a folder of their node
// (hostPath), as small installs of MinIO or a database do, has data no claim holds, which ferry
// does not move: the plan, and so the backup, warns of it, once for the folder.
func TestPlanWarnsOfDataOnNodes(t *testing.T) {
	_, kc := clients(t, "blue")
	ctx := context.Background()
	const ns = "host-data"
	createNamespace(t, kc, ns, nil)
	labels := map[string]string{"app": "store"}
	deploy := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "store"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "store", Image: "store", VolumeMounts: []corev1.VolumeMount{
					{Name: "data", MountPath: "/data"}, {Name: "tz", MountPath: "/etc/localtime", ReadOnly: true}}}},
				Volumes: []corev1.Volume{
					{Name: "data", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/srv/store"}}},
					{Name: "tz", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/etc/localtime"}}},
				}}}}}
	if _, err := kc.AppsV1().Deployments(ns).Create(ctx, deploy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the Deployment's two pods", time.Minute, func(ctx context.Context) (bool, error) {
		pods, err := kc.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=store"})
		return err == nil && len(pods.Items) == 2, err
	})
	code, out, errOut := runFerry(t, "plan", "--from", "blue", "-f", namespacesConfig(t, ns))
	if code != 0 || !regexpLine(out, `warning\s+namespace `+ns+`\s+hostPath /srv/store is written by pods store-\S+ and 1 more: ferry moves claims, not a node's folders`) ||
		strings.Contains(out, "/etc/localtime") {
		t.Errorf("ferry plan exited %d; want 0 and one warning, of /srv/store\nstdout: %s\nstderr: %s", code, out, errOut)
	}
}

// TestReadWriteOncePodClaimInUse: a ReadWriteOncePod claim may be mounted by one pod at a time.
// While its pod runs, a backup skips its files at once, naming the pod (a mover on the pod's node
// would be a second pod); once the pod is gone, the next backup holds them.
func TestReadWriteOncePodClaimInUse(t *testing.T) {
	_, kc := clients(t, "blue")
	ctx := context.Background()
	const ns = "claim-rwop"
	createNamespace(t, kc, ns, nil)
	blueClaim(t, ns, "solo", map[string][]byte{"journal.log": []byte("one writer only\n")}, func(s *corev1.PersistentVolumeClaimSpec) {
		s.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOncePod}
	})
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "writer", Labels: map[string]string{"app": "writer"}}, Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "writer", Image: "writer", VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
		Volumes:    []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "solo"}}}}}}
	if _, err := kc.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	runningPod(t, kc, ns, "app=writer")
	config := namespacesConfig(t, ns)
	store := "file://" + t.TempDir()
	code, out, errOut := runFerry(t, "--storage", store, "backup", "--from", "blue", "-f", config, "--name", "in-use")
	if code != 3 || strings.Contains(errOut, "claim=solo") {
		t.Fatalf("ferry backup exited %d, want 3, with no mover pod made\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	_, m := readManifest(t, store, "in-use")
	if !slices.ContainsFunc(m.Skipped, func(s snapshot.Skipped) bool {
		return s.Kind == "volume" && s.Name == ns+"/solo" && strings.HasPrefix(s.Reason, "a ReadWriteOncePod claim in use by pod writer")
	}) || len(m.Volumes) > 0 {
		t.Fatalf("the backup should skip %s/solo, naming its pod: skipped %+v, volumes %+v", ns, m.Skipped, m.Volumes)
	}

	if err := kc.CoreV1().Pods(ns).Delete(ctx, "writer", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the writer pod gone", time.Minute, func(ctx context.Context) (bool, error) {
		_, err := kc.CoreV1().Pods(ns).Get(ctx, "writer", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if code, out, errOut := runFerry(t, "--storage", store, "backup", "--from", "blue", "-f", config, "--name", "stopped"); code != 0 {
		t.Fatalf("ferry backup with the pod stopped exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if _, m := readManifest(t, store, "stopped"); len(m.Volumes) != 1 || m.Volumes[0].Name != "solo" || len(m.Skipped) > 0 {
		t.Fatalf("the backup with the pod stopped: volumes %+v, skipped %+v; want solo's files", m.Volumes, m.Skipped)
	}
}

// TestClaimsOfNoClassRestore: a claim of storageClassName "" binds only to a volume made by hand
// (an NFS share, a local disk), which ferry never reuses on the target. A restore onto green stops
// before anything is applied, naming the claims and the two ways on; mapped to green's class with
// --storage-class-map =standard it restores, the claim bound and its files exact.
func TestClaimsOfNoClassRestore(t *testing.T) {
	const ns = "claim-noclass"
	_, greenKC := restoreShapesNamespace(t, ns)
	ctx := context.Background()
	dir := blueClaim(t, ns, "share", map[string][]byte{"datasets/labels.csv": []byte("id,label\n1,cat\n")}, func(s *corev1.PersistentVolumeClaimSpec) {
		s.AccessModes, s.StorageClassName = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}, ptr.To("")
	})
	store := "file://" + t.TempDir()
	if code, out, errOut := runFerry(t, "--storage", store, "backup", "--from", "blue", "-f", namespacesConfig(t, ns), "--name", "noclass"); code != 0 {
		t.Fatalf("ferry backup exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	code, out, errOut := runFerry(t, "--storage", store, "restore", "--to", "green", "--backup", "noclass")
	if code != 3 || !strings.Contains(out, `storageclass "": 1 claim uses no class (storageClassName ""), so only a volume made by hand binds them, and the target has none for them (e.g. `+ns+`/share)`) {
		t.Fatalf("ferry restore exited %d, want 3 and a blocking finding for the claim of no class\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if _, err := greenKC.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "share", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the blocked restore made the claim on green (%v)", err)
	}
	code, out, errOut = runFerry(t, "--storage", store, "restore", "--to", "green", "--backup", "noclass", "--storage-class-map", "=standard")
	if code != 0 {
		t.Fatalf("ferry restore --storage-class-map =standard exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	got, err := greenKC.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "share", metav1.GetOptions{})
	if err != nil || got.Spec.StorageClassName == nil || *got.Spec.StorageClassName != "standard" || got.Status.Phase != corev1.ClaimBound {
		t.Fatalf("green's claim %s/share: %+v, %v; want bound, of class standard", ns, got, err)
	}
	if g, w := claimFiles(t, claimFolder(t, greenKC, ns, "share")), claimFiles(t, dir); !equalMaps(g, w) {
		t.Errorf("green's claim holds %v, blue's %v", g, w)
	}
	if code, out, errOut := runFerry(t, "--storage", store, "verify", "--to", "green", "--backup", "noclass", "--storage-class-map", "=standard"); code != 0 {
		t.Errorf("ferry verify exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
}

// blueClaim creates claim ns/name on blue (ReadWriteOnce, 1Gi, of class standard, as edit changes
// them), writes files into a folder of its own, binds the claim to it and returns the folder.
func blueClaim(t *testing.T, ns, name string, files map[string][]byte, edit func(*corev1.PersistentVolumeClaimSpec)) string {
	t.Helper()
	blue, kc := clients(t, "blue")
	ctx := context.Background()
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: ptr.To("standard"),
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	edit(&pvc.Spec)
	if _, err := kc.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dir := dataDir(t, ns+"-"+name)
	writeClaimFiles(t, dir, files)
	if err := blue.BindClaim(ctx, ns, name, dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// restoreShapesNamespace makes namespace ns on blue for a test that restores it onto green, and
// removes it from both after; green gets its provisioned storage class standard.
func restoreShapesNamespace(t *testing.T, ns string) (blue, green kubernetes.Interface) {
	t.Helper()
	_, blue = clients(t, "blue")
	greenCluster, green := clients(t, "green")
	createNamespace(t, blue, ns, nil)
	removeAfter(t, ns, green)
	if err := greenCluster.Apply(context.Background(), io.Discard, filepath.Join(repoDir(), "integration", "testdata", "standard-storageclass.yaml")); err != nil {
		t.Fatal(err)
	}
	return blue, green
}

// TestZonalClaimsAreMadeWhereTheirWorkloadRuns: on a cluster of zones, a claim's volume is made in
// the zone of the claim's first pod (WaitForFirstConsumer, as zonal disks are), and a restore's
// mover is that first pod. blue's trainer runs only in zone-b, on its tainted (GPU) node, which
// it tolerates, and which is busy. A restore onto such a cluster must make the claim's volume
// where the trainer can mount it: the trainer's pod runs there, with blue's files. Before, the
// mover, placed as any pod, ran on the least loaded node, in zone-a, the volume was made there,
// and the trainer waited for ever, the restore having said it was done.
func TestZonalClaimsAreMadeWhereTheirWorkloadRuns(t *testing.T) {
	const ns, cluster = "claim-zonal", "zones"
	ctx := context.Background()
	_, blueKC := clients(t, "blue")
	createNamespace(t, blueKC, ns, nil)
	removeAfter(t, ns, blueKC)
	zones, err := tb.AddCluster(ctx, cluster)
	if err != nil {
		t.Fatal(err)
	}
	removeClustersAfter(t, cluster)
	zkc, _, err := zones.Clients()
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := zkc.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) < 2 {
		t.Fatalf("the cluster of zones has %d nodes (%v), want 2", len(nodes.Items), err)
	}
	slices.SortFunc(nodes.Items, func(a, b corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	gpu := nodes.Items[1].Name
	for i, zone := range []string{"zone-a", "zone-b"} {
		n := &nodes.Items[i]
		n.Labels[testbed.ZoneLabel] = zone
		if zone == "zone-b" {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule})
		}
		if _, err := zkc.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// zone-b's node is busy, as GPU nodes are: a pod placed as any (a mover without the
	// trainer's placement) goes to zone-a, the least loaded node.
	busy := nodes.Items[1].Status.Allocatable.Cpu().MilliValue() * 9 / 10
	filler := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "gpu-job"}, Spec: corev1.PodSpec{NodeName: gpu,
		Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		Containers: []corev1.Container{{Name: "job", Image: "job:1", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: *resource.NewMilliQuantity(busy, resource.DecimalSI)}}}}}}
	if _, err := zkc.CoreV1().Pods("default").Create(ctx, filler, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	zonal := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "zonal"}, Provisioner: testbed.Provisioner,
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer), Parameters: map[string]string{"topology": "zone"}}
	if _, err := zkc.StorageV1().StorageClasses().Create(ctx, zonal, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	files := map[string][]byte{"checkpoints/epoch-3.pt": []byte("weights of epoch 3"), "config.yaml": []byte("lr: 0.001\n")}
	dir := blueClaim(t, ns, "work", files, func(s *corev1.PersistentVolumeClaimSpec) { s.StorageClassName = ptr.To("zonal") })
	// On blue the trainer waits for a zone-b node (blue has no zones): its pod's spec is what
	// the plan records, as of any pod.
	trainer := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "trainer"}, Spec: appsv1.DeploymentSpec{
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "trainer"}},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "trainer"}}, Spec: corev1.PodSpec{
			NodeSelector: map[string]string{testbed.ZoneLabel: "zone-b"},
			Tolerations:  []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "gpu", Effect: corev1.TaintEffectNoSchedule}},
			Containers:   []corev1.Container{{Name: "train", Image: "trainer:1", VolumeMounts: []corev1.VolumeMount{{Name: "work", MountPath: "/work"}}}},
			Volumes:      []corev1.Volume{{Name: "work", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "work"}}}},
		}},
	}}
	if _, err := blueKC.AppsV1().Deployments(ns).Create(ctx, trainer, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the trainer's pod on blue", time.Minute, func(ctx context.Context) (bool, error) {
		pods, err := blueKC.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=trainer"})
		return err == nil && len(pods.Items) == 1, nil
	})

	store := "file://" + t.TempDir()
	if code, out, errOut := runFerry(t, "--storage", store, "backup", "--from", "blue", "-f", namespacesConfig(t, ns), "--name", "zonal"); code != 0 {
		t.Fatalf("ferry backup exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	code, out, errOut := runFerry(t, "--storage", store, "restore", "--to", cluster, "--backup", "zonal")
	if code != 0 {
		t.Fatalf("ferry restore exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	pvc, err := zkc.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "work", metav1.GetOptions{})
	if err != nil || pvc.Status.Phase != corev1.ClaimBound {
		t.Fatalf("the claim on %s: %+v (%v), want bound", cluster, pvc, err)
	}
	pv, err := zkc.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	zone := ""
	if a := pv.Spec.NodeAffinity; a != nil && a.Required != nil && len(a.Required.NodeSelectorTerms) == 1 {
		if e := a.Required.NodeSelectorTerms[0].MatchExpressions; len(e) == 1 && len(e[0].Values) == 1 {
			zone = e[0].Values[0]
		}
	}
	t.Logf("the claim's volume is in zone %q", zone)
	if zone != "zone-b" {
		t.Errorf("the claim's volume was made in zone %q, want zone-b, where its trainer runs", zone)
	}
	var pod corev1.Pod
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := zkc.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=trainer"})
		if err != nil || len(pods.Items) != 1 {
			return false, nil
		}
		pod = pods.Items[0]
		return pod.Status.Phase == corev1.PodRunning, nil
	})
	if err != nil {
		t.Errorf("the trainer's pod on %s does not run: node %q, %s, %+v", cluster, pod.Spec.NodeName, pod.Status.Phase, pod.Status.Conditions)
	} else if pod.Spec.NodeName != gpu {
		t.Errorf("the trainer runs on %s, want %s", pod.Spec.NodeName, gpu)
	}
	if g, w := claimFiles(t, claimFolder(t, zkc, ns, "work")), claimFiles(t, dir); !equalMaps(g, w) {
		t.Errorf("the claim on %s holds %v, blue's %v", cluster, g, w)
	}
}

// TestClaimsOnlyMadeVolumesBind: a claim that selects a volume by labels, or one of a class
// whose provisioner makes no volumes (local volumes), binds only to a volume someone made. A
// restore onto a target without such a volume would make the claim and wait for ever, its files
// with it: it is a blocking finding that names the claims, and nothing is made. Once green has
// the volumes, the restore binds the claims to them and fills them.
func TestClaimsOnlyMadeVolumesBind(t *testing.T) {
	const ns = "claim-handmade"
	_, greenKC := restoreShapesNamespace(t, ns)
	ctx := context.Background()
	kubectl(t, "green", `apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: local-storage}
provisioner: kubernetes.io/no-provisioner
`, "apply", "-f", "-")
	t.Cleanup(func() {
		kubectl(t, "green", "", "delete", "storageclass/local-storage", "pv/handmade-ssd", "pv/handmade-local", "--ignore-not-found", "--wait=false")
	})
	pickedDir := blueClaim(t, ns, "picked", map[string][]byte{"cache/index.db": []byte("on the ssd\n")}, func(s *corev1.PersistentVolumeClaimSpec) {
		s.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"disk": "ssd"}}
	})
	localDir := blueClaim(t, ns, "local", map[string][]byte{"scratch/run.log": []byte("on the node's disk\n")}, func(s *corev1.PersistentVolumeClaimSpec) {
		s.StorageClassName = ptr.To("local-storage")
	})
	store := "file://" + t.TempDir()
	if code, out, errOut := runFerry(t, "--storage", store, "backup", "--from", "blue", "-f", namespacesConfig(t, ns), "--name", "handmade"); code != 0 {
		t.Fatalf("ferry backup exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	code, out, errOut := runFerry(t, "--storage", store, "restore", "--to", "green", "--backup", "handmade")
	for _, want := range []string{
		"storageclass standard: 1 claim selects a volume by labels (spec.selector), which no provisioner serves, and the target has no free volume of class standard that matches (e.g. " + ns + "/picked)",
		"storageclass local-storage: 1 claim uses class local-storage, whose provisioner makes no volumes (kubernetes.io/no-provisioner), and the target has no free volume of it (e.g. " + ns + "/local)",
	} {
		if code != 3 || !strings.Contains(out, want) {
			t.Errorf("ferry restore exited %d, want 3 and the blocking finding %q\nstdout: %s\nstderr: %s", code, want, out, lastLines(errOut, 10))
		}
	}
	for _, claim := range []string{"picked", "local"} {
		if _, err := greenKC.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the blocked restore made claim %s on green (%v)", claim, err)
		}
	}
	if t.Failed() {
		return
	}

	// The volumes made by hand on green.
	for _, pv := range []struct{ name, class, labels string }{{"handmade-ssd", "standard", "{disk: ssd}"}, {"handmade-local", "local-storage", "{}"}} {
		kubectl(t, "green", `apiVersion: v1
kind: PersistentVolume
metadata: {name: `+pv.name+`, labels: `+pv.labels+`}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  storageClassName: `+pv.class+`
  hostPath: {path: `+dataDir(t, "green-"+pv.name)+`}
`, "apply", "-f", "-")
	}
	waitUntil(t, "green's volumes made by hand available", time.Minute, func(ctx context.Context) (bool, error) {
		for _, name := range []string{"handmade-ssd", "handmade-local"} {
			pv, err := greenKC.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
			if err != nil || pv.Status.Phase != corev1.VolumeAvailable {
				return false, nil
			}
		}
		return true, nil
	})
	if code, out, errOut := runFerry(t, "--storage", store, "restore", "--to", "green", "--backup", "handmade"); code != 0 {
		t.Fatalf("ferry restore with the volumes made exited %d\nstdout: %s\nstderr: %s", code, out, lastLines(errOut, 10))
	}
	for claim, dir := range map[string]string{"picked": pickedDir, "local": localDir} {
		if g, w := claimFiles(t, claimFolder(t, greenKC, ns, claim)), claimFiles(t, dir); !equalMaps(g, w) {
			t.Errorf("green's claim %s holds %v, blue's %v", claim, g, w)
		}
	}
	if code, out, errOut := runFerry(t, "--storage", store, "verify", "--to", "green", "--backup", "handmade"); code != 0 {
		t.Errorf("ferry verify exited %d\nstdout: %s\nstderr: %s", code, out, lastLines(errOut, 10))
	}
}

// TestEphemeralVolumesStayWithTheirPods: a generic ephemeral volume (a pod's `ephemeral` volume)
// is a claim its pod owns, made with the pod and deleted with it: scratch space. The pod's
// controller makes a new pod on green, and the new pod its own claim. Moved, blue's claim had no
// owner on green (its pod is never made there): the restore reported the dropped reference, verify
// the difference, and the claim and its volume stayed on green for ever.
func TestEphemeralVolumesStayWithTheirPods(t *testing.T) {
	const ns = "claim-ephemeral"
	blueKC, greenKC := restoreShapesNamespace(t, ns)
	ctx := context.Background()
	kubectl(t, "blue", `apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: spark-exec, namespace: `+ns+`}
spec:
  replicas: 1
  selector: {matchLabels: {app: spark-exec}}
  template:
    metadata: {labels: {app: spark-exec}}
    spec:
      containers: [{name: exec, image: "registry.example/spark:3", volumeMounts: [{name: scratch, mountPath: /tmp/spark}]}]
      volumes:
      - name: scratch
        ephemeral: {volumeClaimTemplate: {spec: {accessModes: [ReadWriteOnce], storageClassName: standard, resources: {requests: {storage: 1Gi}}}}}
`, "apply", "-f", "-")
	var pod corev1.Pod
	waitUntil(t, "blue's ReplicaSet's pod", time.Minute, func(ctx context.Context) (bool, error) {
		pods, err := blueKC.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=spark-exec"})
		if err != nil || len(pods.Items) == 0 {
			return false, nil
		}
		pod = pods.Items[0]
		return true, nil
	})
	// Blue's ephemeral volume controller makes the claim, <pod>-<volume>, owned by the pod.
	claim := pod.Name + "-scratch"
	waitUntil(t, "the pod's ephemeral claim on blue", time.Minute, func(ctx context.Context) (bool, error) {
		_, err := blueKC.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim, metav1.GetOptions{})
		return err == nil, nil
	})
	made, err := blueKC.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if refs := made.OwnerReferences; len(refs) != 1 || refs[0].Kind != "Pod" || refs[0].Name != pod.Name {
		t.Fatalf("blue's ephemeral claim %s is owned by %+v, want pod %s", claim, refs, pod.Name)
	}
	dir := dataDir(t, ns+"-"+claim)
	writeClaimFiles(t, dir, map[string][]byte{"shuffle/part-0": []byte("spilled\n")})
	blue, _ := clients(t, "blue")
	if err := blue.BindClaim(ctx, ns, claim, dir); err != nil {
		t.Fatal(err)
	}

	store := moveNamespace(t, ns, "ephemeral")
	if _, err := greenKC.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("green has blue's pod's ephemeral claim %s (get: %v)", claim, err)
	}
	// Nor blue's volume of it: the claim green's pod makes would take blue's storage.
	if pv, err := greenKC.CoreV1().PersistentVolumes().Get(ctx, "pv-"+ns+"-"+claim, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("green has blue's volume of the ephemeral claim %s (get: %v): %+v", claim, err, pv.Spec.PersistentVolumeSource)
	}
	if code, out, errOut := runFerry(t, "--storage", store, "verify", "--to", "green", "--backup", "ephemeral"); code != 0 {
		t.Errorf("verify exited %d\n%s\n%s", code, out, lastLines(errOut, 10))
	}
}

// TestReleasedVolumesStayOnTheSource: blue holds a volume whose claim was deleted (of policy
// Retain, as a chart's uninstall leaves it), still naming the claim. A restore of the namespace
// onto green must not make it there: it would be blue's storage waiting for a claim of that name,
// and the first one made on green (the chart installed again) would write into it. The restore
// says it skipped it and why (exit 3, as for any skipped item); the namespace's other claim moves
// with its files; verify passes.
func TestReleasedVolumesStayOnTheSource(t *testing.T) {
	const ns = "claim-released"
	blueKC, greenKC := restoreShapesNamespace(t, ns)
	ctx := context.Background()
	standard := func(s *corev1.PersistentVolumeClaimSpec) {}
	dir := blueClaim(t, ns, "data", map[string][]byte{"notes.txt": []byte("kept\n")}, standard)
	blueClaim(t, ns, "old", map[string][]byte{"model.bin": []byte("released\n")}, standard)
	if err := blueKC.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, "old", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	const releasedPV = "pv-" + ns + "-old"
	waitUntil(t, "blue's volume of the deleted claim released", time.Minute, func(ctx context.Context) (bool, error) {
		pv, err := blueKC.CoreV1().PersistentVolumes().Get(ctx, releasedPV, metav1.GetOptions{})
		return err == nil && pv.Status.Phase == corev1.VolumeReleased, nil
	})

	store := "file://" + t.TempDir()
	if code, out, errOut := runFerry(t, "--storage", store, "backup", "--from", "blue", "-f", namespacesConfig(t, ns), "--name", "released"); code != 0 {
		t.Fatalf("ferry backup exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	// Exit 3: the released volume is skipped, and said so; nothing else is.
	code, rep, errOut := runReportCommand(t, "--storage", store, "restore", "--to", "green", "--backup", "released")
	if code != 3 || rep.Error != "" || len(rep.Items) != 1 || rep.Items[0].Status != snapshot.StatusSkipped || rep.Items[0].Name != "v1 PersistentVolume "+releasedPV ||
		!strings.Contains(rep.Items[0].Detail, "released by the source: bound to claim "+ns+"/old, which the backup does not hold") {
		t.Fatalf("ferry restore exited %d (%s), listing %+v; want 3, listing only %s skipped, bound to a claim the backup does not hold\nstderr: %s", code, rep.Error, rep.Items, releasedPV, errOut)
	}
	if pv, err := greenKC.CoreV1().PersistentVolumes().Get(ctx, releasedPV, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the restore made blue's released volume on green (%v): %+v", err, pv.Spec)
	}
	if g, w := claimFiles(t, claimFolder(t, greenKC, ns, "data")), claimFiles(t, dir); !equalMaps(g, w) {
		t.Errorf("green's claim holds %v, blue's %v", g, w)
	}
	if code, out, errOut := runFerry(t, "--storage", store, "verify", "--to", "green", "--backup", "released"); code != 0 {
		t.Errorf("ferry verify exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
}

// TestClaimsHoldingMoreThanTheyRequestFitOnTheTarget: local-path and NFS provisioners, the
// storage of kind, k3s and many clusters on premises, never enforce a claim's size: a notebook's
// claim of 1Gi holds 30 GiB as easily. A cloud disk or a CSI driver with quotas is made as large
// as the claim requests, and a restore of such a claim ran out of space part way through its
// files, after the migration had stopped blue's writers. blue's claim requests 1Mi and holds
// 5 MiB. A restore onto green must make a claim whose volume holds its files (green's
// provisioner sizes the volume as requested), say that it raised the request, and verify must
// find green exact; a backup of green, checked against blue, must find blue's claim as it is
// (a carry-back does not try to grow blue's).
func TestClaimsHoldingMoreThanTheyRequestFitOnTheTarget(t *testing.T) {
	const ns = "claim-overfull"
	_, greenKC := restoreShapesNamespace(t, ns)
	ctx := context.Background()
	files := map[string][]byte{"model.bin": randomData(4 << 20)}
	for i := range 300 {
		files[fmt.Sprintf("notes/%03d.txt", i)] = randomData(1000)
	}
	dir := blueClaim(t, ns, "workspace", files, func(s *corev1.PersistentVolumeClaimSpec) {
		s.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("1Mi")
	})
	store := "file://" + t.TempDir()
	if code, out, errOut := runFerry(t, "--storage", store, "backup", "--from", "blue", "-f", namespacesConfig(t, ns), "--name", "overfull"); code != 0 {
		t.Fatalf("ferry backup exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	code, out, errOut := runFerry(t, "--storage", store, "restore", "--to", "green", "--backup", "overfull")
	if code != 0 {
		t.Fatalf("ferry restore exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	pvc, err := greenKC.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "workspace", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv, err := greenKC.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	held := allocatedBytes(t, claimFolder(t, greenKC, ns, "workspace"))
	if capacity := pv.Spec.Capacity[corev1.ResourceStorage]; capacity.Value() < held {
		t.Errorf("green's volume for %s/workspace was made with %s (its claim requests %s): too small for the %d bytes its files take",
			ns, capacity.String(), pvc.Spec.Resources.Requests.Storage().String(), held)
	}
	if !regexpLine(out, `\s*restored\s+v1 PersistentVolumeClaim `+ns+`/workspace: .*request.* raised from 1Mi`) {
		t.Errorf("ferry restore did not say it raised the claim's request\nstdout: %s", out)
	}
	if g, w := claimFiles(t, claimFolder(t, greenKC, ns, "workspace")), claimFiles(t, dir); !equalMaps(g, w) {
		t.Errorf("green's claim holds other files than blue's")
	}
	if code, out, errOut := runFerry(t, "--storage", store, "verify", "--to", "green", "--backup", "overfull"); code != 0 {
		t.Errorf("ferry verify exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if code, out, errOut := runFerry(t, "--storage", store, "backup", "--from", "green", "-f", namespacesConfig(t, ns), "--name", "overfull-green"); code != 0 {
		t.Fatalf("ferry backup of green exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if code, out, errOut := runFerry(t, "--storage", store, "verify", "--to", "blue", "--backup", "overfull-green", "--include-resources", "persistentvolumeclaims"); code != 0 {
		t.Errorf("ferry verify of blue's claims against green's backup exited %d, want 0 (blue's claim is as green's was restored)\nstdout: %s\nstderr: %s", code, out, errOut)
	}

	// blue's claim fills on, as it does between a warm migration's rounds: a restore onto green's
	// claim grows it when green's class lets claims grow, and says so when it does not.
	writeClaimFiles(t, dir, map[string][]byte{"model-2.bin": randomData(8 << 20)})
	if code, out, errOut := runFerry(t, "--storage", store, "backup", "--from", "blue", "-f", namespacesConfig(t, ns), "--name", "overfull-2"); code != 0 {
		t.Fatalf("ferry backup exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	code, out, errOut = runFerry(t, "--storage", store, "restore", "--to", "green", "--backup", "overfull-2")
	if code != 0 || !regexpLine(out, `\s*unchanged\s+v1 PersistentVolumeClaim `+ns+`/workspace: the target refused to grow its storage request from 7Mi to 15Mi`) {
		t.Errorf("ferry restore onto a claim of a class that does not let claims grow exited %d, want 0 saying the target refused to grow it\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	kubectl(t, "green", "", "patch", "storageclass", "standard", "-p", `{"allowVolumeExpansion":true}`)
	t.Cleanup(func() {
		kubectl(t, "green", "", "patch", "storageclass", "standard", "-p", `{"allowVolumeExpansion":null}`)
	})
	code, out, errOut = runFerry(t, "--storage", store, "restore", "--to", "green", "--backup", "overfull-2")
	if code != 0 || !regexpLine(out, `\s*updated\s+v1 PersistentVolumeClaim `+ns+`/workspace: its storage request raised from 7Mi to 15Mi`) {
		t.Errorf("ferry restore onto a claim that may grow exited %d, want 0 saying it grew it\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	pvc, err = greenKC.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "workspace", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if request, held := pvc.Spec.Resources.Requests[corev1.ResourceStorage], allocatedBytes(t, claimFolder(t, greenKC, ns, "workspace")); request.Value() < held {
		t.Errorf("green's claim %s/workspace requests %s, too little for the %d bytes its files take", ns, request.String(), held)
	}
	if code, out, errOut := runFerry(t, "--storage", store, "verify", "--to", "green", "--backup", "overfull-2"); code != 0 {
		t.Errorf("ferry verify exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
}

// TestClaimsTheTargetCapsAreMadeAsTheBackups: a LimitRange of green's namespace caps a claim's
// request below what its files take. The restore makes the claim with the backup's request, as
// storage that does not enforce sizes holds the files, and says the target refused the larger one.
func TestClaimsTheTargetCapsAreMadeAsTheBackups(t *testing.T) {
	const ns = "claim-capped"
	_, greenKC := restoreShapesNamespace(t, ns)
	ctx := context.Background()
	createNamespace(t, greenKC, ns, nil)
	limit := &corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Name: "claims"}, Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{
		Type: corev1.LimitTypePersistentVolumeClaim, Max: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Mi")}}}}}
	if _, err := greenKC.CoreV1().LimitRanges(ns).Create(ctx, limit, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dir := blueClaim(t, ns, "workspace", map[string][]byte{"model.bin": randomData(4 << 20)}, func(s *corev1.PersistentVolumeClaimSpec) {
		s.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("1Mi")
	})
	store := "file://" + t.TempDir()
	if code, out, errOut := runFerry(t, "--storage", store, "backup", "--from", "blue", "-f", namespacesConfig(t, ns), "--name", "capped"); code != 0 {
		t.Fatalf("ferry backup exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	code, out, errOut := runFerry(t, "--storage", store, "restore", "--to", "green", "--backup", "capped")
	if code != 0 || !regexpLine(out, `\s*restored\s+v1 PersistentVolumeClaim `+ns+`/workspace: the target refused a larger storage request than the backup's \(.*maximum storage usage per PersistentVolumeClaim is 2Mi`) {
		t.Fatalf("ferry restore exited %d, want 0 saying the target refused the larger request\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	pvc, err := greenKC.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "workspace", metav1.GetOptions{})
	if err != nil || pvc.Spec.Resources.Requests.Storage().String() != "1Mi" {
		t.Fatalf("green's claim: %v, %v; want it requesting the backup's 1Mi", pvc, err)
	}
	if g, w := claimFiles(t, claimFolder(t, greenKC, ns, "workspace")), claimFiles(t, dir); !equalMaps(g, w) {
		t.Errorf("green's claim holds other files than blue's")
	}
}

// randomData is n bytes that do not compress.
func randomData(n int) []byte {
	b := make([]byte, n)
	rand.Read(b) // never fails
	return b
}

// allocatedBytes are the bytes the regular files under dir take on a file system of 4 KiB
// blocks, and a block for each folder.
func allocatedBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var total int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			total += 4096
		case info.Mode().IsRegular():
			total += (info.Size() + 4095) &^ 4095
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return total
}

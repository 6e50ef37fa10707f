package testbed

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// The zoo: shapes real platforms have every day beyond the Kubeflow fixture, for the tests and the
// demo to carry from blue to green and back. Its plain manifests are integration/testdata/zoo;
// ApplyZoo adds what needs doing step by step (revisions, the CRD's storage version, claims bound
// to filled folders, data in the testbed's servers).
const (
	ZooBucket   = "zoo-objects"
	ZooSchema   = "zoo_db" // MariaDB schema, on the MariaDB of the cluster's name
	ZooPGDB     = "zoo"    // PostgreSQL database, on the PostgreSQL of the cluster's name
	zooDataNS   = "zoo-data"
	zooCRD      = "critters.zoo.ferry.dev"
	zooHold     = "zoo.ferry.dev/hold"
	changeCause = "kubernetes.io/change-cause"
)

// zooCRDs are the zoo's CRDs (zooCRD, whose storage version ApplyZoo changes, first).
var zooCRDs = []string{zooCRD, "trainjobs.zoo.ferry.dev", "workflows.zoo.ferry.dev", "searchclusters.zoo.ferry.dev"}

// ZooLongClaim is the zoo's claim of the longest name Kubernetes takes, 253 characters (in
// 50-workloads.yaml), more than a file name holds.
var ZooLongClaim = "exports-of-the-nightly-jobs-" + strings.Repeat("x", 220) + "-kept"

// ZooClusterOwn is the zoo's object in kube-system, which stays on the cluster it is on.
const ZooClusterOwn = "zoo-cluster-dns"

// ZooNamespaces are the namespaces the zoo makes.
var ZooNamespaces = []string{"zoo-apps", "zoo-data", "zoo-team", "zoo-secure"}

// ZooClaim is a claim of the zoo and the folder on this machine its volume lives in.
type ZooClaim struct {
	Namespace, Name string
	// Dir is the folder blue's volume is bound to.
	Dir string
	// Database names the configured database whose pod mounts the claim: it moves as that
	// database (its dump), not as files.
	Database string
}

// ZooRollout is a workload whose rollout history the zoo grew.
type ZooRollout struct {
	// Kind is as kubectl names it: deployment, daemonset, statefulset.
	Kind, Namespace, Name string
	// Causes are the change-causes of revisions 1, 2, 3.
	Causes []string
}

// Zoo is what ApplyZoo made.
type Zoo struct {
	Namespaces []string
	Claims     []ZooClaim
	// MySQLSchemas and PostgresDatabases hold the zoo's rows (and the platform's MySQL schemas,
	// which the zoo's ferry.yaml keeps apart from the zoo's).
	MySQLSchemas      []string
	PostgresDatabases []string
	// Buckets of the cluster's MinIO, and BucketKeys the zoo put into ZooBucket.
	Buckets    []string
	BucketKeys []string
	// NodePorts are the node ports set by hand, by "namespace/service".
	NodePorts map[string][]int32
	// ClusterIPs are the cluster IPs set by hand, by "namespace/service".
	ClusterIPs map[string]string
	Rollouts   []ZooRollout
	// Config is the part of a ferry.yaml that carries the zoo's data (databases and buckets), to
	// append to a configuration that has neither section.
	Config string
}

// zooDir is the folder of the zoo's manifests in the source tree.
func zooDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(filepath.Dir(file)), "testdata", "zoo")
}

// ApplyZoo puts the zoo on cluster c, its data in the testbed's MariaDB, PostgreSQL and MinIO of
// the cluster's name and its volumes in new folders (dataDir), and returns what it made. The
// cluster's claims of class gp3 are bound here; its platform (the kfp MySQL) must already be
// there for the ferry.yaml it returns.
func (tb *Testbed) ApplyZoo(ctx context.Context, c *Cluster, dataDir func(name string) (string, error), out io.Writer) (*Zoo, error) {
	db, pg, m := tb.MariaDB[c.Name], tb.Postgres[c.Name], tb.MinIO[c.Name]
	if db == nil || pg == nil || m == nil {
		return nil, fmt.Errorf("zoo on %s: the testbed has no MariaDB, PostgreSQL and MinIO named %s", c.Name, c.Name)
	}
	if out == nil {
		out = io.Discard
	}
	kc, _, err := c.Clients()
	if err != nil {
		return nil, err
	}
	dir := zooDir()
	z := &Zoo{
		Namespaces:        ZooNamespaces,
		MySQLSchemas:      []string{"mlpipeline", "cachedb", ZooSchema},
		PostgresDatabases: []string{ZooPGDB},
		Buckets:           []string{PlatformBucket, ZooBucket},
		NodePorts:         map[string][]int32{"zoo-apps/web-nodeport": {30180}, "zoo-apps/web-local": {30181}},
		ClusterIPs:        map[string]string{"zoo-data/nfs-server": "10.0.0.10"},
		Config:            zooConfig,
	}
	for _, f := range []string{"00-namespaces.yaml", "10-crd.yaml", "20-policy.yaml", "30-config.yaml", "40-services.yaml", "50-workloads.yaml", "60-critters.yaml", "65-work.yaml", "66-operator.yaml", "70-around.yaml"} {
		if err := c.Apply(ctx, out, filepath.Join(dir, f)); err != nil {
			return nil, fmt.Errorf("zoo: %w", err)
		}
	}
	if err := c.storeCrittersInV1(ctx); err != nil {
		return nil, err
	}
	if err := c.FinishTrainJob(ctx, "resnet"); err != nil {
		return nil, err
	}
	if err := c.ownClaim(ctx, "zoo-team", "logs-data-0", "searchclusters", "logs"); err != nil {
		return nil, err
	}
	if err := DebugPod(ctx, kc, "zoo-apps", "toolbox", "shell"); err != nil {
		return nil, fmt.Errorf("zoo: %w", err)
	}
	if err := zooSecrets(ctx, kc, db, pg, m); err != nil {
		return nil, err
	}
	// Volumes: the files claim, the notebook's and the vault's filled; the databases' claims,
	// made by their StatefulSets, bound to empty folders.
	for _, cl := range []struct {
		ns, name, db string
		fill         func(string) error
	}{
		{"zoo-apps", "odd-files", "", fillOddFiles},
		{"zoo-apps", "datasets", "", fillDatasets},
		{"zoo-apps", ZooLongClaim, "", fillPlain("nightly export")},
		{"zoo-team", "workspace", "", fillPlain("notebook")},
		{"zoo-secure", "vault-data", "", fillPlain("vault")},
		{"zoo-team", "logs-data-0", "", fillPlain("search index")},
		{zooDataNS, "data-zoo-mariadb-0", "zoo-mariadb", nil},
		{zooDataNS, "data-zoo-postgres-0", "zoo-postgres", nil},
	} {
		folder, err := dataDir(cl.ns + "-" + cl.name[:min(len(cl.name), 40)])
		if err != nil {
			return nil, err
		}
		if cl.fill != nil {
			if err := cl.fill(folder); err != nil {
				return nil, fmt.Errorf("zoo: fill %s/%s: %w", cl.ns, cl.name, err)
			}
		}
		if err := waitClaim(ctx, kc, cl.ns, cl.name); err != nil {
			return nil, err
		}
		if err := c.BindClaim(ctx, cl.ns, cl.name, folder); err != nil {
			return nil, fmt.Errorf("zoo: bind %s/%s: %w", cl.ns, cl.name, err)
		}
		z.Claims = append(z.Claims, ZooClaim{Namespace: cl.ns, Name: cl.name, Dir: folder, Database: cl.db})
	}
	pgDir, err := dataDir("zoo-postgres-exec")
	if err != nil {
		return nil, err
	}
	if err := tb.ServeZoo(ctx, c, c.Name, pgDir); err != nil {
		return nil, err
	}
	rollouts, err := growHistory(ctx, kc)
	if err != nil {
		return nil, err
	}
	z.Rollouts = rollouts
	if err := tb.seedZooMariaDB(ctx, db); err != nil {
		return nil, err
	}
	if err := tb.seedZooPostgres(ctx, pg); err != nil {
		return nil, err
	}
	if z.BucketKeys, err = seedZooBucket(ctx, m); err != nil {
		return nil, err
	}
	for _, sel := range []string{"app=zoo-mariadb", "app=zoo-postgres", "app=zoo-minio"} {
		if err := waitRunning(ctx, kc, zooDataNS, sel); err != nil {
			return nil, err
		}
	}
	// An admin lowers the Profile's quota below what its namespace holds: Kubernetes keeps what
	// was made, and so must a copy.
	lower := []byte(`{"spec":{"hard":{"persistentvolumeclaims":"1","requests.storage":"1Gi","count/deployments.apps":"0","count/trainjobs.zoo.ferry.dev":"1"}}}`)
	if _, err := kc.CoreV1().ResourceQuotas("zoo-team").Patch(ctx, "kf-resource-quota", k8stypes.MergePatchType, lower, metav1.PatchOptions{}); err != nil {
		return nil, fmt.Errorf("zoo: lower the quota of zoo-team: %w", err)
	}
	return z, nil
}

// zooConfig carries the zoo's data: its databases (in StatefulSets) and bucket. kfp-mysql is
// limited to the platform's own schemas, so the zoo's schema on the same server is dumped once.
const zooConfig = `databases:
- name: kfp-mysql
  engine: mysql
  namespace: kubeflow
  workload: deployment/mysql
  secret: {name: mysql-secret, userKey: username, passwordKey: password}
  schemas: [mlpipeline, cachedb]
- name: zoo-mariadb
  engine: mysql
  namespace: zoo-data
  workload: statefulset/zoo-mariadb
  secret: {name: zoo-mariadb-creds, userKey: username, passwordKey: password}
  schemas: [` + ZooSchema + `]
- name: zoo-postgres
  engine: postgresql
  namespace: zoo-data
  workload: statefulset/zoo-postgres
  secret: {name: zoo-postgres-creds, userKey: user, passwordKey: password}
  schemas: [` + ZooPGDB + `]
quiesce:
- resource: cronjobs.batch
  namespace: zoo-apps
  names: [report]
  action: suspend
  why: the report writes to the zoo's database
- resource: deployments.apps
  namespace: zoo-apps
  names: [worker]
  action: scale-to-zero
  why: the worker writes to the zoo's database
buckets:
- name: mlpipeline
  namespace: kubeflow
  workload: deployment/minio
  port: 9000
  secret: {name: mlpipeline-minio-artifact, accessKeyKey: accesskey, secretKeyKey: secretkey}
- name: ` + ZooBucket + `
  namespace: zoo-data
  workload: deployment/zoo-minio
  port: 9000
  secret: {name: zoo-minio-creds, accessKeyKey: accesskey, secretKeyKey: secretkey}
`

// ServeZoo maps the zoo's database and MinIO pods on c, now and later, to the testbed's servers
// named servers: blue's for blue, green's on a green the zoo is restored to. pgDir is the working
// folder of the PostgreSQL pod's commands.
func (tb *Testbed) ServeZoo(ctx context.Context, c *Cluster, servers, pgDir string) error {
	db, pg, m := tb.MariaDB[servers], tb.Postgres[servers], tb.MinIO[servers]
	if db == nil || pg == nil || m == nil {
		return fmt.Errorf("serve the zoo on %s: the testbed has no MariaDB, PostgreSQL and MinIO named %s", c.Name, servers)
	}
	if err := tb.ServeExec(c, zooDataNS, "app=zoo-mariadb", db.ClientHome, db.Env()); err != nil {
		return err
	}
	env := pg.Env()
	delete(env, "PGPASSWORD") // ferry hands the Secret's password over itself
	if err := tb.ServeExec(c, zooDataNS, "app=zoo-postgres", pgDir, env); err != nil {
		return err
	}
	return tb.ServePortForward(c, zooDataNS, "app=zoo-minio", 9000, "127.0.0.1", m.Port)
}

// zooSecrets holds the credentials of the zoo's databases and MinIO (the testbed's servers of one
// kind share them, so they are right on green too).
func zooSecrets(ctx context.Context, kc kubernetes.Interface, db *MariaDB, pg *PostgreSQL, m *MinIO) error {
	for name, data := range map[string]map[string]string{
		"zoo-mariadb-creds":  {"username": db.User, "password": db.Password},
		"zoo-postgres-creds": {"user": pg.User, "password": pg.Password},
		"zoo-minio-creds":    {"accesskey": m.AccessKey, "secretkey": m.SecretKey},
	} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: zooDataNS}, StringData: data}
		if _, err := kc.CoreV1().Secrets(zooDataNS).Create(ctx, s, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("zoo: secret %s: %w", name, err)
		}
	}
	return nil
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// storeCrittersInV1 makes v1 the storage version: the Critters already written stay stored in
// v1alpha1 (status.storedVersions lists both).
func (c *Cluster) storeCrittersInV1(ctx context.Context) error {
	_, dc, err := c.Clients()
	if err != nil {
		return err
	}
	patch := []byte(`[{"op":"replace","path":"/spec/versions/0/storage","value":false},{"op":"replace","path":"/spec/versions/1/storage","value":true}]`)
	if _, err := dc.Resource(crdGVR).Patch(ctx, zooCRD, k8stypes.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("zoo: make v1 the storage version of %s: %w", zooCRD, err)
	}
	return nil
}

// DebugPod adds to a pod the ephemeral container `kubectl debug --target` adds, through the
// pod's ephemeralcontainers subresource (the only way to add one), as kubectl does again when the
// pod changed in between (kwok writes its status).
func DebugPod(ctx context.Context, kc kubernetes.Interface, ns, name, target string) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pod, err := kc.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		pod.Spec.EphemeralContainers = append(pod.Spec.EphemeralContainers, corev1.EphemeralContainer{
			EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debugger-x7k2p", Image: "registry.example/busybox:1", Stdin: true, TTY: true},
			TargetContainerName:      target,
		})
		_, err = kc.CoreV1().Pods(ns).UpdateEphemeralContainers(ctx, name, pod, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("debug pod %s/%s: %w", ns, name, err)
	}
	return nil
}

// FinishTrainJob gives the zoo's TrainJob of that name the status its controller would write once
// it succeeded, through the status subresource.
func (c *Cluster) FinishTrainJob(ctx context.Context, name string) error {
	_, dc, err := c.Clients()
	if err != nil {
		return err
	}
	status := []byte(`{"status":{"observedGeneration":1,"completionTime":"2026-11-29T23:12:00Z","conditions":[` +
		`{"type":"Created","status":"True"},{"type":"Succeeded","status":"True","reason":"JobSucceeded","observedGeneration":1}]}}`)
	jobs := dc.Resource(schema.GroupVersionResource{Group: "zoo.ferry.dev", Version: "v1", Resource: "trainjobs"}).Namespace("zoo-team")
	if _, err := jobs.Patch(ctx, name, k8stypes.MergePatchType, status, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("zoo: finish trainjob %s: %w", name, err)
	}
	return nil
}

// ownClaim makes the zoo's custom resource (of resource, in group zoo.ferry.dev) the controlling
// owner of a claim in its namespace, as an operator makes its resource own its data.
func (c *Cluster) ownClaim(ctx context.Context, ns, claim, resource, owner string) error {
	kc, dc, err := c.Clients()
	if err != nil {
		return err
	}
	cr, err := dc.Resource(schema.GroupVersionResource{Group: "zoo.ferry.dev", Version: "v1", Resource: resource}).Namespace(ns).Get(ctx, owner, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("zoo: %s %s: %w", resource, owner, err)
	}
	pvc, err := kc.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("zoo: claim %s: %w", claim, err)
	}
	yes := true
	pvc.OwnerReferences = []metav1.OwnerReference{{APIVersion: cr.GetAPIVersion(), Kind: cr.GetKind(), Name: owner, UID: cr.GetUID(), Controller: &yes, BlockOwnerDeletion: &yes}}
	if _, err := kc.CoreV1().PersistentVolumeClaims(ns).Update(ctx, pvc, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("zoo: claim %s owned by %s %s: %w", claim, resource, owner, err)
	}
	return nil
}

// FinishWorkflow makes the zoo's Workflow of that name (its status part of the object) succeed, as
// its controller would.
func (c *Cluster) FinishWorkflow(ctx context.Context, name string) error {
	_, dc, err := c.Clients()
	if err != nil {
		return err
	}
	status := []byte(`{"status":{"phase":"Succeeded","finishedAt":"2026-11-30T03:12:40Z","nodes":{"` + name + `":{"phase":"Succeeded","type":"Steps"}}}}`)
	workflows := dc.Resource(schema.GroupVersionResource{Group: "zoo.ferry.dev", Version: "v1", Resource: "workflows"}).Namespace("zoo-team")
	if _, err := workflows.Patch(ctx, name, k8stypes.MergePatchType, status, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("zoo: finish workflow %s: %w", name, err)
	}
	return nil
}

// growHistory changes the template of a Deployment, a DaemonSet and a StatefulSet twice, each
// time with a change-cause, waiting for the controller to see each change: three revisions each.
func growHistory(ctx context.Context, kc kubernetes.Interface) ([]ZooRollout, error) {
	apps := kc.AppsV1()
	rollouts := []ZooRollout{
		{Kind: "deployment", Namespace: "zoo-apps", Name: "web", Causes: []string{"release 1", "release 2: new env", "release 3: rollback drill"}},
		{Kind: "daemonset", Namespace: "zoo-apps", Name: "agent", Causes: []string{"agent 1", "agent 2", "agent 3"}},
		{Kind: "statefulset", Namespace: "zoo-apps", Name: "cache", Causes: []string{"cache 1", "cache 2", "cache 3"}},
	}
	for rev := 2; rev <= 3; rev++ {
		for _, r := range rollouts {
			patch, _ := json.Marshal(map[string]any{
				"metadata": map[string]any{"annotations": map[string]string{changeCause: r.Causes[rev-1]}},
				"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"containers": []any{
					map[string]any{"name": r.Name, "env": []any{map[string]any{"name": "RELEASE", "value": fmt.Sprint(rev)}}}}}}},
			})
			var err error
			switch r.Kind {
			case "deployment":
				_, err = apps.Deployments(r.Namespace).Patch(ctx, r.Name, k8stypes.StrategicMergePatchType, patch, metav1.PatchOptions{})
			case "daemonset":
				_, err = apps.DaemonSets(r.Namespace).Patch(ctx, r.Name, k8stypes.StrategicMergePatchType, patch, metav1.PatchOptions{})
			case "statefulset":
				_, err = apps.StatefulSets(r.Namespace).Patch(ctx, r.Name, k8stypes.StrategicMergePatchType, patch, metav1.PatchOptions{})
			}
			if err != nil {
				return nil, fmt.Errorf("zoo: revision %d of %s %s: %w", rev, r.Kind, r.Name, err)
			}
		}
		for _, r := range rollouts {
			if err := waitRolledOut(ctx, kc, r); err != nil {
				return nil, fmt.Errorf("zoo: revision %d of %s %s: %w", rev, r.Kind, r.Name, err)
			}
		}
	}
	return rollouts, nil
}

// waitRolledOut waits until the workload's controller has seen its latest template and rolled it
// out, so that the next change makes a revision of its own.
func waitRolledOut(ctx context.Context, kc kubernetes.Interface, r ZooRollout) error {
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		switch r.Kind {
		case "deployment":
			d, err := kc.AppsV1().Deployments(r.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
			return err == nil && d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas == *d.Spec.Replicas &&
				d.Status.Replicas == d.Status.UpdatedReplicas && d.Status.AvailableReplicas == d.Status.UpdatedReplicas, nil
		case "daemonset":
			d, err := kc.AppsV1().DaemonSets(r.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
			return err == nil && d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedNumberScheduled == d.Status.DesiredNumberScheduled &&
				d.Status.NumberAvailable == d.Status.DesiredNumberScheduled && d.Status.DesiredNumberScheduled > 0, nil
		default:
			s, err := kc.AppsV1().StatefulSets(r.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
			return err == nil && s.Status.ObservedGeneration >= s.Generation && s.Status.UpdateRevision == s.Status.CurrentRevision &&
				s.Status.UpdatedReplicas == *s.Spec.Replicas && s.Status.ReadyReplicas == *s.Spec.Replicas, nil
		}
	})
}

// waitClaim waits until a claim exists: a StatefulSet makes its claims a moment after it is created.
func waitClaim(ctx context.Context, kc kubernetes.Interface, ns, name string) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := kc.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("zoo: claim %s/%s never appeared: %w", ns, name, err)
	}
	return nil
}

func waitRunning(ctx context.Context, kc kubernetes.Interface, ns, selector string) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		pods, err := kc.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, nil
		}
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("zoo: no running pod with %s in %s: %w", selector, ns, err)
	}
	return nil
}

// fillDatasets writes 6 MiB of data that does not compress, in files of 1 MiB and of 1 KiB.
func fillDatasets(dir string) error {
	rng := rand.NewChaCha8([32]byte{5})
	var errs []error
	for i := range 6 {
		b := make([]byte, 1<<20)
		rng.Read(b)
		errs = append(errs, os.WriteFile(filepath.Join(dir, fmt.Sprintf("shard-%d.bin", i)), b, 0o644))
	}
	errs = append(errs, os.MkdirAll(filepath.Join(dir, "labels"), 0o755))
	for i := range 200 {
		b := make([]byte, 1<<10)
		rng.Read(b)
		errs = append(errs, os.WriteFile(filepath.Join(dir, "labels", fmt.Sprintf("%03d.bin", i)), b, 0o644))
	}
	return errors.Join(errs...)
}

// fillOddFiles writes what tenants leave in volumes: hardlinks, a sparse file, a FIFO, empty
// folders, a name that is not UTF-8, a 255-byte name, a tree deeper than PATH_MAX, symlinks,
// other owners, odd modes, old times.
func fillOddFiles(dir string) error {
	var errs []error
	must := func(err error) { errs = append(errs, err) }
	data := make([]byte, 2<<20+17)
	rand.NewChaCha8([32]byte{'z', 'o', 'o'}).Read(data)
	must(os.MkdirAll(filepath.Join(dir, "links"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "data.bin"), data, 0o644))
	must(os.WriteFile(filepath.Join(dir, "a.txt"), []byte("one inode, three names\n"), 0o640))
	must(os.Link(filepath.Join(dir, "a.txt"), filepath.Join(dir, "links", "b.txt")))
	must(os.Link(filepath.Join(dir, "a.txt"), filepath.Join(dir, "links", "c.txt")))
	must(os.Symlink("a.txt", filepath.Join(dir, "link-to-a")))
	must(os.Symlink("../missing/target", filepath.Join(dir, "links", "dangling")))
	// 64 MiB apparent, two 4 KiB extents of data.
	sparse, err := os.Create(filepath.Join(dir, "disk.img"))
	if err == nil {
		block := bytes.Repeat([]byte{0xAB}, 4096)
		_, err1 := sparse.WriteAt(block, 0)
		_, err2 := sparse.WriteAt(block, 32<<20)
		err3 := sparse.Truncate(64 << 20)
		must(errors.Join(err1, err2, err3, sparse.Close()))
	}
	must(err)
	must(syscall.Mkfifo(filepath.Join(dir, "control.fifo"), 0o620))
	must(os.MkdirAll(filepath.Join(dir, "empty", "deeper"), 0o750))
	must(os.WriteFile(filepath.Join(dir, "latin1-\xe9t\xe9.txt"), []byte("a name in ISO-8859-1\n"), 0o644))
	long := strings.Repeat("n", 251) + ".txt" // 255 bytes, the longest name a file system takes
	must(os.MkdirAll(filepath.Join(dir, "deep", strings.Repeat("d", 200), strings.Repeat("e", 200)), 0o755))
	must(os.WriteFile(filepath.Join(dir, "deep", strings.Repeat("d", 200), strings.Repeat("e", 200), long), []byte("long\n"), 0o644))
	must(DeepTree(filepath.Join(dir, "deeper-than-path-max")))
	must(os.WriteFile(filepath.Join(dir, "日本語 ファイル.md"), []byte("unicode\n"), 0o600))
	must(os.WriteFile(filepath.Join(dir, "empty-file"), nil, 0o444))
	must(os.MkdirAll(filepath.Join(dir, "shared"), 0o770))
	must(os.Chmod(filepath.Join(dir, "shared"), 0o2770))
	must(os.WriteFile(filepath.Join(dir, "shared", "owned.txt"), []byte("owned by 1234:5678\n"), 0o640))
	must(os.Lchown(filepath.Join(dir, "shared", "owned.txt"), 1234, 5678))
	must(os.WriteFile(filepath.Join(dir, "run.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755))
	must(zooXattrs(dir))
	old := time.Date(2021, 2, 3, 4, 5, 6, 789_000_000, time.UTC)
	must(os.Chtimes(filepath.Join(dir, "data.bin"), old, old))
	must(os.Chtimes(filepath.Join(dir, "empty", "deeper"), old, old))
	return errors.Join(errs...)
}

// zooXattrs sets what users and admins set on a volume's files beside their contents: a team
// folder's default ACL and a file's ACL (setfacl), user attributes (one of bytes that are no text,
// one on the sparse file), a file capability (setcap; only root sets it, so it is left out
// otherwise).
func zooXattrs(dir string) error {
	const undefined = 0xffffffff
	acl := binary.LittleEndian.AppendUint32(nil, 2) // owner rw, user 1000 r, group r, mask r, others -
	for _, e := range [][3]uint32{{0x01, 6, undefined}, {0x02, 4, 1000}, {0x04, 4, undefined}, {0x10, 4, undefined}, {0x20, 0, undefined}} {
		acl = binary.LittleEndian.AppendUint16(acl, uint16(e[0]))
		acl = binary.LittleEndian.AppendUint16(acl, uint16(e[1]))
		acl = binary.LittleEndian.AppendUint32(acl, e[2])
	}
	capability := binary.LittleEndian.AppendUint32(nil, 0x02000001)  // revision 2, effective
	capability = binary.LittleEndian.AppendUint32(capability, 1<<10) // CAP_NET_BIND_SERVICE
	capability = append(capability, make([]byte, 12)...)
	errs := []error{
		unix.Setxattr(filepath.Join(dir, "shared"), "system.posix_acl_default", acl, 0),
		unix.Setxattr(filepath.Join(dir, "shared"), "user.team", []byte("analytics"), 0),
		unix.Setxattr(filepath.Join(dir, "shared", "owned.txt"), "system.posix_acl_access", acl, 0),
		unix.Setxattr(filepath.Join(dir, "data.bin"), "user.checksum", []byte("md5\x00\xfe\x01"), 0),
		unix.Setxattr(filepath.Join(dir, "disk.img"), "user.kind", []byte("raw disk"), 0),
	}
	if err := unix.Setxattr(filepath.Join(dir, "run.sh"), "security.capability", capability, 0); !errors.Is(err, unix.EPERM) {
		errs = append(errs, err)
	}
	// The claim's root folder: a team share's setgid bit and default ACL.
	errs = append(errs, unix.Setxattr(dir, "system.posix_acl_default", acl, 0), unix.Setxattr(dir, "user.share", []byte("team"), 0),
		os.Chmod(dir, 0o2770|os.ModeSetgid))
	return errors.Join(errs...)
}

// DeepTree makes at dir a tree whose deepest path passes PATH_MAX (4,096 bytes), which no call
// naming the whole path reaches (ENAMETOOLONG): 25 folders of 200-byte names, a file and a
// symlink at the bottom, made through each folder's descriptor, as nothing else can.
func DeepTree(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	fd, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	name := strings.Repeat("d", 200)
	for range 25 {
		next := -1
		if err = unix.Mkdirat(fd, name, 0o755); err == nil {
			next, err = unix.Openat(fd, name, unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		}
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("deep tree in %s: %w", dir, err)
		}
		fd = next
	}
	defer unix.Close(fd)
	f, err := unix.Openat(fd, "leaf.txt", unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
	if err == nil {
		_, err = unix.Write(f, []byte("at the bottom\n"))
		unix.Close(f)
	}
	if err == nil {
		err = unix.Symlinkat("leaf.txt", fd, "link")
	}
	if err != nil {
		return fmt.Errorf("deep tree in %s: %w", dir, err)
	}
	return nil
}

// DeepLeaf is the file at the bottom of DeepTree, from its dir.
var DeepLeaf = strings.TrimPrefix(strings.Repeat("/"+strings.Repeat("d", 200), 25), "/") + "/leaf.txt"

// fillPlain writes a few ordinary files named after the app.
func fillPlain(app string) func(dir string) error {
	return func(dir string) error {
		var errs []error
		for i := range 20 {
			sub := filepath.Join(dir, "work", fmt.Sprintf("%02d", i%4))
			errs = append(errs, os.MkdirAll(sub, 0o755),
				os.WriteFile(filepath.Join(sub, fmt.Sprintf("%s-%02d.json", app, i)), fmt.Appendf(nil, `{"app": %q, "n": %d}`, app, i), 0o644))
		}
		errs = append(errs, os.Lchown(filepath.Join(dir, "work"), 1000, 100))
		return errors.Join(errs...)
	}
}

// seedZooMariaDB makes ZooSchema: rows of every common type, LONGBLOB rows of 10 MiB and 40 MiB
// (the server's max_allowed_packet raised for them, as a server holding such rows has it), a
// view, a trigger, a procedure and a function.
func (tb *Testbed) seedZooMariaDB(ctx context.Context, db *MariaDB) error {
	if _, err := db.SQL(ctx, tb.Bins, "SET GLOBAL max_allowed_packet = 128*1024*1024"); err != nil {
		return err
	}
	var rows strings.Builder
	for i := range 300 {
		fmt.Fprintf(&rows, "(%d, 'item-%d ünïcødé', %d.%02d, '2026-0%d-1%d 12:34:56', %d),", i+1, i, i, i%100, i%9+1, i%9, i%3)
	}
	sql := `DROP DATABASE IF EXISTS ` + ZooSchema + `; CREATE DATABASE ` + ZooSchema + ` CHARACTER SET utf8mb4; USE ` + ZooSchema + `;
CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(64), price DECIMAL(10,2), created DATETIME, kind TINYINT, KEY (kind));
CREATE TABLE audit (id INT AUTO_INCREMENT PRIMARY KEY, item INT, note VARCHAR(64));
CREATE TABLE blobs (id INT PRIMARY KEY, label VARCHAR(32), data LONGBLOB);
CREATE TABLE nokey (a INT, b VARCHAR(8));
INSERT INTO items VALUES ` + strings.TrimSuffix(rows.String(), ",") + `;
INSERT INTO nokey VALUES (1, 'x'), (1, 'x'), (2, NULL);
CREATE VIEW cheap AS SELECT id, name FROM items WHERE price < 10;
CREATE TRIGGER items_audit AFTER INSERT ON items FOR EACH ROW INSERT INTO audit (item, note) VALUES (NEW.id, 'inserted');
CREATE PROCEDURE count_items(OUT n INT) SELECT COUNT(*) INTO n FROM items;
CREATE FUNCTION price_of(i INT) RETURNS DECIMAL(10,2) READS SQL DATA RETURN (SELECT price FROM items WHERE id = i);`
	if _, err := db.SQL(ctx, tb.Bins, sql); err != nil {
		return err
	}
	// A new connection takes the raised limit. 64 pseudo-random bytes repeated: 10 MiB and 40 MiB.
	_, err := db.SQL(ctx, tb.Bins, `INSERT INTO `+ZooSchema+`.blobs VALUES (1, 'ten MiB', REPEAT(UNHEX(SHA2('zoo-10', 512)), 163840));
INSERT INTO `+ZooSchema+`.blobs VALUES (2, 'forty MiB', REPEAT(UNHEX(SHA2('zoo-40', 512)), 655360));
INSERT INTO `+ZooSchema+`.blobs VALUES (3, 'small', UNHEX('00FF10'));`)
	if err != nil {
		return err
	}
	out, err := db.SQL(ctx, tb.Bins, "SELECT SUM(LENGTH(data)) FROM "+ZooSchema+".blobs")
	if err == nil && strings.TrimSpace(out) != fmt.Sprint(50<<20+3) {
		err = fmt.Errorf("zoo: the LONGBLOB rows hold %s bytes, want %d", strings.TrimSpace(out), 50<<20+3)
	}
	return err
}

// seedZooPostgres makes the database ZooPGDB: two schemas, bytea, a view, a function, a trigger
// and files kept as large objects, which rows name by their oids.
func (tb *Testbed) seedZooPostgres(ctx context.Context, pg *PostgreSQL) error {
	if _, err := pg.SQL(ctx, tb.Bins, "postgres", "DROP DATABASE IF EXISTS "+ZooPGDB+" WITH (FORCE)"); err != nil {
		return err
	}
	if _, err := pg.SQL(ctx, tb.Bins, "postgres", "CREATE DATABASE "+ZooPGDB); err != nil {
		return err
	}
	_, err := pg.SQL(ctx, tb.Bins, ZooPGDB, `CREATE SCHEMA shop;
CREATE TABLE public.users (id int PRIMARY KEY, name text NOT NULL, avatar bytea, joined timestamptz);
CREATE TABLE shop.orders (id bigserial PRIMARY KEY, user_id int REFERENCES public.users(id), total numeric(12,2), meta jsonb);
CREATE TABLE shop.log (at timestamptz DEFAULT now(), what text);
INSERT INTO public.users SELECT g, 'user ' || g || ' ñ', decode(md5(g::text), 'hex'), '2026-01-01'::timestamptz + g * interval '1 hour' FROM generate_series(1, 500) g;
INSERT INTO shop.orders (user_id, total, meta) SELECT 1 + g % 500, g * 1.25, jsonb_build_object('n', g) FROM generate_series(1, 1000) g;
CREATE VIEW shop.big_orders AS SELECT id, total FROM shop.orders WHERE total > 1000;
CREATE FUNCTION shop.order_total(u int) RETURNS numeric LANGUAGE sql AS $$ SELECT coalesce(sum(total), 0) FROM shop.orders WHERE user_id = u $$;
CREATE FUNCTION shop.log_order() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO shop.log (what) VALUES ('order ' || NEW.id); RETURN NEW; END $$;
CREATE TRIGGER orders_log AFTER INSERT ON shop.orders FOR EACH ROW EXECUTE FUNCTION shop.log_order();
CREATE TABLE public.attachments (id int PRIMARY KEY, user_id int REFERENCES public.users(id), file oid NOT NULL);
INSERT INTO public.attachments SELECT g, g, lo_from_bytea(0, decode(repeat(md5(g::text), 512 * g), 'hex')) FROM generate_series(1, 5) g;`)
	return err
}

// zooLongKeys are the zoo's longest bucket keys: near S3's 1,024 bytes, in
// segments MinIO takes (at most 255 bytes each), some of characters escaping triples.
func zooLongKeys() []string {
	seg := func(s string, n int) string { return strings.Repeat(s, n) }
	return []string{
		seg("a", 250) + "/" + seg("b", 250) + "/" + seg("c", 250) + "/" + seg("d", 250) + "/end.bin",                       // 1,011 bytes
		seg("ä", 125) + "/" + seg("ö", 125) + "/" + seg("ü", 125) + "/" + seg("ß", 125) + "/x",                             // 1,005 bytes
		"spaces and #marks?/" + seg("s p", 80) + "/" + seg("%", 250) + "/" + seg("&=", 125) + "/" + seg("z", 230) + ".txt", // near 1,024
	}
}

// seedZooBucket fills ZooBucket of the MinIO m: many small objects, an empty one, a 3 MiB one,
// keys near 1,024 bytes and one encrypted under the KMS's key; it returns the keys.
func seedZooBucket(ctx context.Context, m *MinIO) ([]string, error) {
	if err := m.CreateBucket(ctx, ZooBucket); err != nil {
		return nil, err
	}
	objects := map[string][]byte{"empty": {}, "nested/deeper/still/leaf.json": []byte(`{"leaf": true}`)}
	big := make([]byte, 3<<20+1)
	rand.NewChaCha8([32]byte{'b', 'u', 'c', 'k'}).Read(big)
	objects["models/big.bin"] = big
	for i := range 60 {
		objects[fmt.Sprintf("many/obj-%03d.txt", i)] = fmt.Appendf(nil, "object %d\n", i)
	}
	for i, k := range zooLongKeys() {
		if len(k) > 1024 {
			return nil, fmt.Errorf("zoo: long key %d has %d bytes, more than S3 allows", i, len(k))
		}
		sum := sha256.Sum256([]byte(k))
		objects[k] = sum[:]
	}
	s3c := m.S3Client()
	// Settings a platform's store gives its buckets: versions kept, anyone may read the shared
	// models, scratch files expire, tags for cost reports.
	if _, err := s3c.PutBucketVersioning(ctx, &s3.PutBucketVersioningInput{Bucket: aws.String(ZooBucket),
		VersioningConfiguration: &types.VersioningConfiguration{Status: types.BucketVersioningStatusEnabled}}); err != nil {
		return nil, fmt.Errorf("zoo: versioning of %s: %w", ZooBucket, err)
	}
	if _, err := s3c.PutBucketPolicy(ctx, &s3.PutBucketPolicyInput{Bucket: aws.String(ZooBucket), Policy: aws.String(
		`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":["*"]},"Action":["s3:GetObject"],"Resource":["arn:aws:s3:::` + ZooBucket + `/models/*"]}]}`)}); err != nil {
		return nil, fmt.Errorf("zoo: policy of %s: %w", ZooBucket, err)
	}
	if _, err := s3c.PutBucketLifecycleConfiguration(ctx, &s3.PutBucketLifecycleConfigurationInput{Bucket: aws.String(ZooBucket),
		LifecycleConfiguration: &types.BucketLifecycleConfiguration{Rules: []types.LifecycleRule{{ID: aws.String("scratch"), Status: types.ExpirationStatusEnabled,
			Filter: &types.LifecycleRuleFilter{Prefix: aws.String("scratch/")}, Expiration: &types.LifecycleExpiration{Days: aws.Int32(3)}}}}}); err != nil {
		return nil, fmt.Errorf("zoo: lifecycle of %s: %w", ZooBucket, err)
	}
	if _, err := s3c.PutBucketTagging(ctx, &s3.PutBucketTaggingInput{Bucket: aws.String(ZooBucket),
		Tagging: &types.Tagging{TagSet: []types.Tag{{Key: aws.String("team"), Value: aws.String("zoo")}}}}); err != nil {
		return nil, fmt.Errorf("zoo: tags of %s: %w", ZooBucket, err)
	}
	// Kept encrypted at rest: new objects by the store's keys (SSE-S3), the ledger under the
	// KMS's key, as a platform keeps its users' records.
	if _, err := s3c.PutBucketEncryption(ctx, &s3.PutBucketEncryptionInput{Bucket: aws.String(ZooBucket), ServerSideEncryptionConfiguration: &types.ServerSideEncryptionConfiguration{
		Rules: []types.ServerSideEncryptionRule{{ApplyServerSideEncryptionByDefault: &types.ServerSideEncryptionByDefault{SSEAlgorithm: types.ServerSideEncryptionAes256}}}}}); err != nil {
		return nil, fmt.Errorf("zoo: default encryption of %s: %w", ZooBucket, err)
	}
	objects["records/ledger.csv"] = []byte("id,amount\n1,100\n")
	var keys []string
	for key, data := range objects {
		in := &s3.PutObjectInput{Bucket: aws.String(ZooBucket), Key: aws.String(key), Body: bytes.NewReader(data)}
		switch key {
		case "models/big.bin":
			in.Tagging = aws.String("stage=prod&owner=zoo") // what lifecycle rules and reports select by
		case "records/ledger.csv":
			in.ServerSideEncryption, in.SSEKMSKeyId = types.ServerSideEncryptionAwsKms, aws.String(KMSKey)
		}
		if _, err := s3c.PutObject(ctx, in); err != nil {
			return nil, fmt.Errorf("zoo: put a key of %d bytes into %s's MinIO: %w", len(key), m.Name, err)
		}
		keys = append(keys, key)
	}
	return keys, nil
}

// RemoveZoo takes the zoo off cluster c and the testbed's servers named servers, best effort and
// waiting until its namespaces are gone: finalizers first (nothing else would remove them), then
// the namespaces, the CRD, the volumes bound to its claims, the schema, database and bucket.
func (tb *Testbed) RemoveZoo(ctx context.Context, c *Cluster, servers string) error {
	kc, dc, err := c.Clients()
	if err != nil {
		return err
	}
	var errs []error
	unhold := []byte(`{"metadata":{"finalizers":null}}`)
	if _, err := kc.CoreV1().ConfigMaps("zoo-apps").Patch(ctx, "held", k8stypes.MergePatchType, unhold, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, err)
	}
	for _, v := range []string{"v1", "v1alpha1"} {
		res := dc.Resource(schema.GroupVersionResource{Group: "zoo.ferry.dev", Version: v, Resource: "critters"}).Namespace("zoo-apps")
		if list, err := res.List(ctx, metav1.ListOptions{}); err == nil {
			for _, o := range list.Items {
				if _, err := res.Patch(ctx, o.GetName(), k8stypes.MergePatchType, unhold, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
					errs = append(errs, err)
				}
			}
			break
		}
	}
	if err := kc.CoreV1().ConfigMaps("kube-system").Delete(ctx, ZooClusterOwn, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, err)
	}
	for _, ns := range ZooNamespaces {
		if err := kc.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	for _, crd := range zooCRDs {
		if err := dc.Resource(crdGVR).Delete(ctx, crd, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	if pvs, err := kc.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{}); err == nil {
		for _, pv := range pvs.Items {
			if pv.Spec.ClaimRef != nil && strings.HasPrefix(pv.Spec.ClaimRef.Namespace, "zoo-") {
				kc.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{})
			}
		}
	}
	for _, ns := range ZooNamespaces {
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := kc.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("namespace %s on %s is still there: %w", ns, c.Name, err))
		}
	}
	if db := tb.MariaDB[servers]; db != nil {
		if _, err := db.SQL(ctx, tb.Bins, "DROP DATABASE IF EXISTS "+ZooSchema); err != nil {
			errs = append(errs, err)
		}
	}
	if pg := tb.Postgres[servers]; pg != nil {
		if _, err := pg.SQL(ctx, tb.Bins, "postgres", "DROP DATABASE IF EXISTS "+ZooPGDB+" WITH (FORCE)"); err != nil {
			errs = append(errs, err)
		}
	}
	if m := tb.MinIO[servers]; m != nil {
		errs = append(errs, RemoveBucket(ctx, m.S3Client(), ZooBucket))
	}
	return errors.Join(errs...)
}

// RemoveBucket deletes a bucket of the store s3c reaches and its objects, every version of them;
// a missing bucket is fine.
func RemoveBucket(ctx context.Context, s3c *s3.Client, bucket string) error {
	p := s3.NewListObjectVersionsPaginator(s3c, &s3.ListObjectVersionsInput{Bucket: aws.String(bucket)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		var apiErr smithy.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode() == "NoSuchBucket" {
			return nil
		}
		if err != nil {
			return fmt.Errorf("empty bucket %s: %w", bucket, err)
		}
		type version struct{ key, id *string }
		var versions []version
		for _, v := range page.Versions {
			versions = append(versions, version{v.Key, v.VersionId})
		}
		for _, d := range page.DeleteMarkers {
			versions = append(versions, version{d.Key, d.VersionId})
		}
		for _, v := range versions {
			if _, err := s3c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: v.key, VersionId: v.id}); err != nil {
				return fmt.Errorf("empty bucket %s: %w", bucket, err)
			}
		}
	}
	_, err := s3c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(bucket)})
	return err
}

// Kubectl runs the testbed's kubectl against cluster c and returns its output.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, c.bins["kubectl"], append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s on %s: %w: %s", strings.Join(args, " "), c.Name, err, stderr.String())
	}
	return stdout.String(), nil
}

package testbed

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The platform's data (the kfp MySQL and MinIO of namespace kubeflow, as the Kubeflow fixture and
// the sample platform both have them), shared by the integration tests and the demo.
const (
	platformNamespace = "kubeflow"
	// PlatformBucket is the bucket of the platform's MinIO that SeedMinIO fills.
	PlatformBucket = "mlpipeline"
)

// Seeded is the data SeedPlatform put on a cluster.
type Seeded struct {
	// Objects are the PlatformBucket's keys and contents.
	Objects map[string][]byte
}

// SeedPlatform runs the platform's MySQL and MinIO pods on the cluster, served by the testbed's
// servers of the cluster's name, with their data (see SeedMySQL and SeedMinIO). dataDir gives
// the folders their claims bind to.
func (tb *Testbed) SeedPlatform(ctx context.Context, c *Cluster, dataDir func(name string) (string, error)) (Seeded, error) {
	if err := tb.SeedMySQL(ctx, c, dataDir); err != nil {
		return Seeded{}, err
	}
	objects, err := tb.SeedMinIO(ctx, c, dataDir)
	return Seeded{Objects: objects}, err
}

// SeedMySQL binds the kfp mysql-pv-claim (so the MySQL Deployment's pod is scheduled), serves its
// pods' exec with the testbed's MariaDB of the cluster's name, puts that server's credentials into
// the Secret mysql-secret and creates two schemas: mlpipeline (run_details of 500 rows,
// empty_table) and cachedb (execution_caches of 2 rows).
func (tb *Testbed) SeedMySQL(ctx context.Context, c *Cluster, dataDir func(name string) (string, error)) error {
	db := tb.MariaDB[c.Name]
	if db == nil {
		return fmt.Errorf("seed MySQL of %s: the testbed has no MariaDB named %s", c.Name, c.Name)
	}
	dir, err := dataDir("mysql")
	if err != nil {
		return err
	}
	if err := c.BindClaim(ctx, platformNamespace, "mysql-pv-claim", dir); err != nil {
		return fmt.Errorf("seed MySQL of %s: %w", c.Name, err)
	}
	if err := tb.ServeExec(c, platformNamespace, "app=mysql", db.ClientHome, db.Env()); err != nil {
		return err
	}
	if err := c.setSecret(ctx, platformNamespace, "mysql-secret", map[string][]byte{"username": []byte(db.User), "password": []byte(db.Password)}); err != nil {
		return err
	}
	var rows strings.Builder
	for i := range 500 {
		fmt.Fprintf(&rows, "(%d, 'run-%d', %d.5),", i, i, i)
	}
	_, err = db.SQL(ctx, tb.Bins, `DROP DATABASE IF EXISTS mlpipeline; CREATE DATABASE mlpipeline;
CREATE TABLE mlpipeline.run_details (id INT PRIMARY KEY, name VARCHAR(64), score DOUBLE);
INSERT INTO mlpipeline.run_details VALUES `+strings.TrimSuffix(rows.String(), ",")+`;
CREATE TABLE mlpipeline.empty_table (id INT PRIMARY KEY);
DROP DATABASE IF EXISTS cachedb; CREATE DATABASE cachedb; CREATE TABLE cachedb.execution_caches (k VARCHAR(10)); INSERT INTO cachedb.execution_caches VALUES ('a'),('b');`)
	return err
}

// SeedMinIO binds the kfp minio-pvc, forwards its MinIO pods' port 9000 to the testbed's MinIO of
// the cluster's name, puts that server's credentials into the Secret mlpipeline-minio-artifact
// and fills PlatformBucket with nested keys, a 5 MiB object, an empty one and odd names; it
// returns them.
func (tb *Testbed) SeedMinIO(ctx context.Context, c *Cluster, dataDir func(name string) (string, error)) (map[string][]byte, error) {
	m := tb.MinIO[c.Name]
	if m == nil {
		return nil, fmt.Errorf("seed MinIO of %s: the testbed has no MinIO named %s", c.Name, c.Name)
	}
	dir, err := dataDir("minio")
	if err != nil {
		return nil, err
	}
	if err := c.BindClaim(ctx, platformNamespace, "minio-pvc", dir); err != nil {
		return nil, fmt.Errorf("seed MinIO of %s: %w", c.Name, err)
	}
	if err := tb.ServePortForward(c, platformNamespace, "app=minio", 9000, "127.0.0.1", m.Port); err != nil {
		return nil, err
	}
	if err := c.setSecret(ctx, platformNamespace, "mlpipeline-minio-artifact", map[string][]byte{"accesskey": []byte(m.AccessKey), "secretkey": []byte(m.SecretKey)}); err != nil {
		return nil, err
	}
	if err := m.CreateBucket(ctx, PlatformBucket); err != nil {
		return nil, err
	}
	big := make([]byte, 5<<20+123)
	rand.NewChaCha8([32]byte{1}).Read(big)
	objects := map[string][]byte{
		"v2/artifacts/run-1/model.tgz":     big,
		"v2/artifacts/run-1/metrics":       []byte(`{"accuracy": 0.93}`),
		"empty":                            {},
		"odd key/with spaces & #hash?.txt": []byte("odd"),
	}
	s3c := m.S3Client()
	for key, data := range objects {
		if _, err := s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(PlatformBucket), Key: aws.String(key), Body: bytes.NewReader(data)}); err != nil {
			return nil, fmt.Errorf("put %q into %s's MinIO: %w", key, c.Name, err)
		}
	}
	return objects, nil
}

// ServePlatform readies a cluster as a green that receives the platform: its claims of the
// default class "standard" are provisioned (for clusters the testbed provisions), and its kfp
// MySQL and MinIO pods, once restored there, are served by the testbed's servers named servers.
func (tb *Testbed) ServePlatform(ctx context.Context, c *Cluster, servers string) error {
	db, m := tb.MariaDB[servers], tb.MinIO[servers]
	if db == nil || m == nil {
		return fmt.Errorf("serve the platform on %s: the testbed has no MariaDB and MinIO named %s", c.Name, servers)
	}
	if err := c.ApplyStandardStorageClass(ctx); err != nil {
		return err
	}
	if err := tb.ServeExec(c, platformNamespace, "app=mysql", db.ClientHome, db.Env()); err != nil {
		return err
	}
	return tb.ServePortForward(c, platformNamespace, "app=minio", 9000, "127.0.0.1", m.Port)
}

// ApplyStandardStorageClass creates (or updates) the default StorageClass "standard" whose claims
// the testbed's provisioner serves — the class green's claims are mapped to.
func (c *Cluster) ApplyStandardStorageClass(ctx context.Context) error {
	kc, _, err := c.Clients()
	if err != nil {
		return err
	}
	reclaim, binding := corev1.PersistentVolumeReclaimDelete, storagev1.VolumeBindingImmediate
	class := &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: "standard", Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}},
		Provisioner:       Provisioner,
		ReclaimPolicy:     &reclaim,
		VolumeBindingMode: &binding,
	}
	_, err = kc.StorageV1().StorageClasses().Create(ctx, class, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		var cur *storagev1.StorageClass
		if cur, err = kc.StorageV1().StorageClasses().Get(ctx, class.Name, metav1.GetOptions{}); err == nil {
			// Provisioner, reclaim policy and binding mode are immutable: keep them, mark it default.
			if cur.Annotations == nil {
				cur.Annotations = map[string]string{}
			}
			cur.Annotations["storageclass.kubernetes.io/is-default-class"] = "true"
			_, err = kc.StorageV1().StorageClasses().Update(ctx, cur, metav1.UpdateOptions{})
		}
	}
	if err != nil {
		return fmt.Errorf("storage class standard on %s: %w", c.Name, err)
	}
	return nil
}

// setSecret replaces the data of an existing Secret.
func (c *Cluster) setSecret(ctx context.Context, namespace, name string, data map[string][]byte) error {
	kc, _, err := c.Clients()
	if err != nil {
		return err
	}
	secret, err := kc.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("secret %s/%s on %s: %w", namespace, name, c.Name, err)
	}
	secret.Data, secret.StringData = data, nil
	if _, err = kc.CoreV1().Secrets(namespace).Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("secret %s/%s on %s: %w", namespace, name, c.Name, err)
	}
	return nil
}

// PyTorchJobs is the resource of release 1's PyTorchJob, a kind the sample's release 2 (and Kubeflow
// v1.11.0) removed.
var PyTorchJobs = schema.GroupVersionResource{Group: "kubeflow.org", Version: "v1", Resource: "pytorchjobs"}

// AddPyTorchJob puts a PyTorchJob on the cluster: a user's training job of release 1.
func (c *Cluster) AddPyTorchJob(ctx context.Context, namespace, name string) error {
	_, dyn, err := c.Clients()
	if err != nil {
		return err
	}
	job := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
		"metadata": map[string]any{"name": name, "namespace": namespace},
		"spec": map[string]any{"pytorchReplicaSpecs": map[string]any{"Master": map[string]any{"replicas": int64(1),
			"template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "pytorch", "image": "pytorch/pytorch:2.7.1"}}}}}}},
	}}
	if _, err := dyn.Resource(PyTorchJobs).Namespace(namespace).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("PyTorchJob %s/%s on %s: %w", namespace, name, c.Name, err)
	}
	return nil
}

package integration

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/ferrykube/ferry/integration/testbed"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The platform's data on blue, set up once per package run and shared by the tests that back it
// up, restore it or migrate it.
var (
	mysqlOnce, minioOnce sync.Once
	mysqlErr, minioErr   error
	// bucketObjects is what blue's mlpipeline bucket holds.
	bucketObjects map[string][]byte
)

// serveDatabase makes the cluster's kfp MySQL pods (now and later) run on the testbed's MariaDB
// named db, and its mysql-pv-claim bound, as blue's are; the Secret holds the server's credentials.
func serveDatabase(ctx context.Context, c *testbed.Cluster, db *testbed.MariaDB) error {
	return tb.ServeExec(c, "kubeflow", "app=mysql", db.ClientHome, db.Env())
}

// blueMySQL runs the platform's MySQL pod on blue (its exec served by blue's MariaDB) with two
// schemas: mlpipeline (run_details of 500 rows, empty_table) and cachedb (2 rows).
func blueMySQL(t *testing.T) {
	t.Helper()
	applyPlatform(t)
	blue, kc := clients(t, "blue")
	db := tb.MariaDB["blue"]
	mysqlOnce.Do(func() {
		ctx := context.Background()
		// The claim gets a volume, so the Deployment's pod is scheduled and runs.
		if mysqlErr = blue.BindClaim(ctx, "kubeflow", "mysql-pv-claim", dataDir(t, "mysql")); mysqlErr != nil {
			return
		}
		if mysqlErr = serveDatabase(ctx, blue, db); mysqlErr != nil {
			return
		}
		if mysqlErr = setSecret(ctx, kc, "kubeflow", "mysql-secret", map[string][]byte{"username": []byte(db.User), "password": []byte(db.Password)}); mysqlErr != nil {
			return
		}
		var rows strings.Builder
		for i := range 500 {
			fmt.Fprintf(&rows, "(%d, 'run-%d', %d.5),", i, i, i)
		}
		_, mysqlErr = db.SQL(ctx, tb.Bins, `DROP DATABASE IF EXISTS mlpipeline; CREATE DATABASE mlpipeline;
CREATE TABLE mlpipeline.run_details (id INT PRIMARY KEY, name VARCHAR(64), score DOUBLE);
INSERT INTO mlpipeline.run_details VALUES `+strings.TrimSuffix(rows.String(), ",")+`;
CREATE TABLE mlpipeline.empty_table (id INT PRIMARY KEY);
DROP DATABASE IF EXISTS cachedb; CREATE DATABASE cachedb; CREATE TABLE cachedb.execution_caches (k VARCHAR(10)); INSERT INTO cachedb.execution_caches VALUES ('a'),('b');`)
	})
	if mysqlErr != nil {
		t.Fatal(mysqlErr)
	}
	runningPod(t, kc, "kubeflow", "app=mysql")
}

// blueMinIO runs the platform's MinIO pod on blue (port 9000 served by blue's MinIO) with the
// mlpipeline bucket holding bucketObjects: nested keys, a 5 MiB object, an empty one, odd names.
func blueMinIO(t *testing.T) map[string][]byte {
	t.Helper()
	applyPlatform(t)
	blue, kc := clients(t, "blue")
	m := tb.MinIO["blue"]
	minioOnce.Do(func() {
		ctx := context.Background()
		if minioErr = blue.BindClaim(ctx, "kubeflow", "minio-pvc", dataDir(t, "minio")); minioErr != nil {
			return
		}
		if minioErr = tb.ServePortForward(blue, "kubeflow", "app=minio", 9000, "127.0.0.1", m.Port); minioErr != nil {
			return
		}
		if minioErr = setSecret(ctx, kc, "kubeflow", "mlpipeline-minio-artifact", map[string][]byte{"accesskey": []byte(m.AccessKey), "secretkey": []byte(m.SecretKey)}); minioErr != nil {
			return
		}
		if minioErr = m.CreateBucket(ctx, "mlpipeline"); minioErr != nil {
			return
		}
		big := make([]byte, 5<<20+123)
		rand.NewChaCha8([32]byte{1}).Read(big)
		bucketObjects = map[string][]byte{
			"v2/artifacts/run-1/model.tgz":     big,
			"v2/artifacts/run-1/metrics":       []byte(`{"accuracy": 0.93}`),
			"empty":                            {},
			"odd key/with spaces & #hash?.txt": []byte("odd"),
		}
		s3c := m.S3Client()
		for key, data := range bucketObjects {
			if _, minioErr = s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("mlpipeline"), Key: aws.String(key), Body: bytes.NewReader(data)}); minioErr != nil {
				minioErr = fmt.Errorf("put %q: %w", key, minioErr)
				return
			}
		}
	})
	if minioErr != nil {
		t.Fatal(minioErr)
	}
	runningPod(t, kc, "kubeflow", "app=minio")
	return bucketObjects
}

func setSecret(ctx context.Context, kc kubernetes.Interface, namespace, name string, data map[string][]byte) error {
	secret, err := kc.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	secret.Data, secret.StringData = data, nil
	_, err = kc.CoreV1().Secrets(namespace).Update(ctx, secret, metav1.UpdateOptions{})
	return err
}

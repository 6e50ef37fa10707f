package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/snapshot/buckets"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestBackupCopiesBucket runs the platform's MinIO pod on blue (its port 9000 forwarded to blue's
// MinIO server) and checks that ferry backup copies the mlpipeline bucket object by object.
func TestBackupCopiesBucket(t *testing.T) {
	applyPlatform(t)
	blue, kc := clients(t, "blue")
	minioBlue := tb.MinIO["blue"]
	ctx := context.Background()
	if err := blue.BindClaim(ctx, "kubeflow", "minio-pvc", dataDir(t, "minio")); err != nil {
		t.Fatal(err)
	}
	pod := runningPod(t, kc, "kubeflow", "app=minio")
	if err := blue.MapPortForward(ctx, "kubeflow", pod, 9000, "127.0.0.1", minioBlue.Port); err != nil {
		t.Fatal(err)
	}
	secret, err := kc.CoreV1().Secrets("kubeflow").Get(ctx, "mlpipeline-minio-artifact", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secret.Data = map[string][]byte{"accesskey": []byte(minioBlue.AccessKey), "secretkey": []byte(minioBlue.SecretKey)}
	secret.StringData = nil
	if _, err := kc.CoreV1().Secrets("kubeflow").Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := minioBlue.CreateBucket(ctx, "mlpipeline"); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 5<<20+123)
	rand.NewChaCha8([32]byte{1}).Read(big)
	want := map[string][]byte{
		"v2/artifacts/run-1/model.tgz":     big,
		"v2/artifacts/run-1/metrics":       []byte(`{"accuracy": 0.93}`),
		"empty":                            {},
		"odd key/with spaces & #hash?.txt": []byte("odd"),
	}
	s3c := minioBlue.S3Client()
	for key, data := range want {
		if _, err := s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("mlpipeline"), Key: aws.String(key), Body: bytes.NewReader(data)}); err != nil {
			t.Fatalf("put %q: %v", key, err)
		}
	}

	url := backupMinIO(t, "buckettest")
	code, out, errOut := runFerry(t, "--storage", url, "backup", "--from", "blue", "--preset", "kubeflow", "--name", "with-bucket")
	if code != 3 || strings.Contains(out, "bucket mlpipeline") {
		t.Fatalf("ferry backup exited %d (want 3 for the skipped volumes, and the bucket copied)\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	store, m := readManifest(t, url, "with-bucket")
	if len(m.Buckets) != 1 || len(m.Buckets[0].Objects) != len(want) {
		t.Fatalf("manifest buckets: %+v", m.Buckets)
	}
	b := m.Buckets[0]
	for _, o := range b.Objects {
		data, ok := want[o.Key]
		sum := sha256.Sum256(data)
		if !ok || o.Size != int64(len(data)) || o.SHA256 != hex.EncodeToString(sum[:]) {
			t.Errorf("object %q: size %d sha %s; want size %d sha %x", o.Key, o.Size, o.SHA256, len(data), sum)
			continue
		}
		rc, err := store.Get(ctx, snapshot.Prefix("with-bucket")+b.Prefix+buckets.EscapeKey(o.Key))
		if err != nil {
			t.Fatal(err)
		}
		stored, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || !bytes.Equal(stored, data) {
			t.Errorf("stored copy of %q differs (%d bytes, %v)", o.Key, len(stored), err)
		}
	}
}

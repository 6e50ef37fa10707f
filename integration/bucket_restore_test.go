package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/ferrykube/ferry/integration/testbed"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/snapshot/buckets"
)

// serveMinIO runs a MinIO workload in namespace on cluster, its port 9000 forwarded to the
// cluster's own MinIO server of the testbed, with its keys in a Secret.
func serveMinIO(t *testing.T, cluster, namespace string) {
	t.Helper()
	serveMinIOOf(t, cluster, namespace, tb.MinIO[cluster])
}

// serveMinIOOf is serveMinIO with the testbed's MinIO m in place of the cluster's.
func serveMinIOOf(t *testing.T, cluster, namespace string, m *testbed.MinIO) {
	t.Helper()
	c, kc := clients(t, cluster)
	pod := serveWorkload(t, kc, namespace, "minio", "artifact-keys", map[string]string{"accesskey": m.AccessKey, "secretkey": m.SecretKey})
	if err := c.MapPortForward(context.Background(), namespace, pod, 9000, "127.0.0.1", m.Port); err != nil {
		t.Fatal(err)
	}
}

// bucketContents lists a bucket of a testbed MinIO (the keys under prefix) and reads every object:
// key to bytes.
func bucketContents(t *testing.T, m *testbed.MinIO, bucket, prefix string) map[string][]byte {
	t.Helper()
	ctx := context.Background()
	s3c := m.S3Client()
	out := map[string][]byte{}
	p := s3.NewListObjectsV2Paginator(s3c, &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(prefix)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page.Contents {
			got, err := s3c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: o.Key})
			if err != nil {
				t.Fatal(err)
			}
			data, err := io.ReadAll(got.Body)
			got.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			out[*o.Key] = data
		}
	}
	return out
}

// TestRestoreBucket backs up a bucket of blue's MinIO (nested and odd keys, an empty object, one
// big enough for a multipart upload) encrypted, restores it into green's MinIO reached through
// green's own pod in a mapped namespace, and checks green's objects by listing and hashing them;
// then verify, restoring twice, pruning, a deleted object, an object changed on green and a
// tampered stored copy.
func TestRestoreBucket(t *testing.T) {
	testbed.Require(t, tb)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const blueNS, greenNS, bucket = "bucket-restore", "bucket-restore-green", "rs-artifacts"
	serveMinIO(t, "blue", blueNS)
	serveMinIO(t, "green", greenNS)
	blueMinIO, greenMinIO := tb.MinIO["blue"], tb.MinIO["green"]
	if err := blueMinIO.CreateBucket(ctx, bucket); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 17<<20+5) // more than one 16 MiB part
	rand.NewChaCha8([32]byte{7}).Read(big)
	want := map[string][]byte{
		"v2/artifacts/pipeline-1/run-3/step/output.tgz": big,
		"v2/artifacts/pipeline-1/run-3/metrics.json":    []byte(`{"accuracy": 0.93}`),
		"v2/artifacts/pipeline-2/run-1/a/b/c/d/e.txt":   []byte("deep"),
		"données/été/résultat.json":                     []byte(`{"ok": "oui"}`),
		"odd key/with spaces & #hash?.txt":              []byte("odd"),
		"..dots/.hidden":                                []byte("dots"),
		"empty":                                         {},
	}
	// Objects carry metadata beside their bytes, which must move with them.
	const metricsKey, oddKey, secretNote = "v2/artifacts/pipeline-1/run-3/metrics.json", "odd key/with spaces & #hash?.txt", "canary-9c1e4b7d"
	wantMeta := map[string]func(*s3.PutObjectInput){
		metricsKey: func(in *s3.PutObjectInput) {
			in.ContentType, in.Metadata = aws.String("application/json"), map[string]string{"run": "3", "note": secretNote}
		},
		oddKey: func(in *s3.PutObjectInput) {
			in.ContentType, in.CacheControl, in.ContentDisposition = aws.String("text/plain; charset=utf-8"), aws.String("no-cache"), aws.String(`attachment; filename="odd.txt"`)
		},
	}
	for key, data := range want {
		in := &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(data)}
		if set := wantMeta[key]; set != nil {
			set(in)
		}
		if _, err := blueMinIO.S3Client().PutObject(ctx, in); err != nil {
			t.Fatalf("put %q: %v", key, err)
		}
	}
	// green's store starts without the bucket, as a new cluster's would.
	for key := range bucketContentsIfAny(ctx, greenMinIO, bucket) {
		greenMinIO.S3Client().DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	}
	greenMinIO.S3Client().DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(bucket)})

	config := bucketConfig(t, blueNS, bucket)
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	url := backupMinIO(t, "bucketrestore")
	const backup = "bucket-restore"
	code, out, errOut := runFerry(t, "--storage", url, "backup", "--from", "blue", "-f", config, "--name", backup, "--encrypt-to", id.Recipient().String())
	if (code != 0 && code != 3) || strings.Contains(out, "bucket "+bucket) {
		t.Fatalf("ferry backup exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	store, m := readManifest(t, url, backup)
	if len(m.Buckets) != 1 || len(m.Buckets[0].Objects) != len(want) {
		t.Fatalf("the backup's buckets: %+v", m.Buckets)
	}

	greenCluster, greenKC := clients(t, "green")
	cfg, err := greenCluster.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	copies := buckets.Copies{Config: cfg, Client: greenKC, Parallel: 4, Mapping: snapshot.Mapping{Namespaces: map[string]string{blueNS: greenNS}}}
	run := func(t *testing.T, what string, fn func(context.Context, *snapshot.Reader, *snapshot.Report) error) *snapshot.Report {
		t.Helper()
		r, err := snapshot.Open(ctx, store, backup, []age.Identity{id})
		if err != nil {
			t.Fatal(err)
		}
		var report snapshot.Report
		start := time.Now()
		if err := fn(ctx, r, &report); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		t.Logf("%s took %s: %v", what, time.Since(start).Round(time.Millisecond), report.Counts["buckets"])
		return &report
	}
	clean := func(t *testing.T, what string, report *snapshot.Report, counts map[string]int) {
		t.Helper()
		if items := report.Problems(); len(items) > 0 {
			t.Fatalf("%s lists problems: %+v", what, items)
		}
		if !maps.Equal(report.Counts["buckets"], counts) {
			t.Fatalf("%s counts %v, want %v", what, report.Counts["buckets"], counts)
		}
	}
	head := func(t *testing.T, mc *testbed.MinIO, key string) *s3.HeadObjectOutput {
		t.Helper()
		out, err := mc.S3Client().HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
		if err != nil {
			t.Fatalf("head %q: %v", key, err)
		}
		return out
	}
	sameAsBlue := func(t *testing.T, when string) {
		t.Helper()
		for key := range wantMeta {
			b, g := head(t, blueMinIO, key), head(t, greenMinIO, key)
			delete(g.Metadata, strings.ToLower(buckets.SHA256Metadata))
			if aws.ToString(b.ContentType) != aws.ToString(g.ContentType) || aws.ToString(b.CacheControl) != aws.ToString(g.CacheControl) ||
				aws.ToString(b.ContentDisposition) != aws.ToString(g.ContentDisposition) || !maps.Equal(b.Metadata, g.Metadata) {
				t.Errorf("%s: green's %q has content type %q, cache control %q, disposition %q, %d user metadata; blue's %q, %q, %q, %d",
					when, key, aws.ToString(g.ContentType), aws.ToString(g.CacheControl), aws.ToString(g.ContentDisposition), len(g.Metadata),
					aws.ToString(b.ContentType), aws.ToString(b.CacheControl), aws.ToString(b.ContentDisposition), len(b.Metadata))
			}
		}
		got := bucketContents(t, greenMinIO, bucket, "")
		if len(got) != len(want) {
			t.Errorf("%s: green holds %d objects, blue %d: %v", when, len(got), len(want), slices.Sorted(maps.Keys(got)))
		}
		for key, data := range want {
			g, ok := got[key]
			if !ok || sha256.Sum256(g) != sha256.Sum256(data) {
				t.Errorf("%s: green's %q: %d bytes (there: %v), blue's %d", when, key, len(g), ok, len(data))
			}
		}
	}
	n := len(want)

	runSteps(t, step{"restore", func(t *testing.T) {
		clean(t, "the restore", run(t, "restore", copies.Restore), map[string]int{snapshot.StatusRestored: n})
		sameAsBlue(t, "after a restore")
		clean(t, "verify", run(t, "verify", copies.Verify), map[string]int{snapshot.StatusIdentical: n})

	}}, step{"twice: nothing uploaded again", func(t *testing.T) {
		// Twice: nothing is uploaded again.
		before := lastModified(t, greenMinIO, bucket)
		clean(t, "a second restore", run(t, "restore", copies.Restore), map[string]int{snapshot.StatusUnchanged: n})
		if after := lastModified(t, greenMinIO, bucket); !maps.Equal(before, after) {
			t.Errorf("a second restore rewrote objects: before %v, after %v", before, after)
		}
		sameAsBlue(t, "after a second restore")
		clean(t, "verify after a second restore", run(t, "verify", copies.Verify), map[string]int{snapshot.StatusIdentical: n})

	}}, step{"an object green has and the backup does not", func(t *testing.T) {
		// An object green has and the backup does not: verify names it, a restore leaves it, one that
		// prunes deletes it.
		const extra = "green/only.txt"
		if _, err := greenMinIO.S3Client().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(extra), Body: strings.NewReader("green")}); err != nil {
			t.Fatal(err)
		}
		onlyOne(t, run(t, "verify", copies.Verify), snapshot.StatusDifferent, bucket+"/"+extra, "not in the backup")
		clean(t, "a restore beside an extra object", run(t, "restore", copies.Restore), map[string]int{snapshot.StatusUnchanged: n})
		pruning := copies
		pruning.Exact = true
		onlyOne(t, run(t, "restore with Prune", pruning.Restore), snapshot.StatusDeleted, bucket+"/"+extra, "not in the backup")
		sameAsBlue(t, "after pruning")

	}}, step{"one object less on green", func(t *testing.T) {
		// One object less on green: verify names exactly it.
		const victim = "v2/artifacts/pipeline-1/run-3/metrics.json"
		if _, err := greenMinIO.S3Client().DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(victim)}); err != nil {
			t.Fatal(err)
		}
		onlyOne(t, run(t, "verify", copies.Verify), snapshot.StatusMissing, bucket+"/"+victim, "not on the target")
		clean(t, "a restore of a deleted object", run(t, "restore", copies.Restore), map[string]int{snapshot.StatusRestored: 1, snapshot.StatusUnchanged: n - 1})

	}}, step{"an object changed on green", func(t *testing.T) {
		// An object changed on green, same size, written without ferry's digest: verify hashes it, a
		// restore hashes it too and puts the backup's back.
		const changed = "données/été/résultat.json"
		if _, err := greenMinIO.S3Client().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(changed), Body: strings.NewReader(`{"ok": "non"}`)}); err != nil {
			t.Fatal(err)
		}
		onlyOne(t, run(t, "verify", copies.Verify), snapshot.StatusDifferent, bucket+"/"+changed, "SHA-256: backup ")
		clean(t, "a restore of a changed object", run(t, "restore", copies.Restore), map[string]int{snapshot.StatusUpdated: 1, snapshot.StatusUnchanged: n - 1})
		sameAsBlue(t, "after restoring a changed object")

	}}, step{"metadata changed on green", func(t *testing.T) {
		// Metadata changed on green, the bytes the same: verify names the content type with both
		// values and the user metadata by key only; a restore puts the backup's back.
		if _, err := greenMinIO.S3Client().CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String(bucket), Key: aws.String(metricsKey),
			CopySource: aws.String(bucket + "/" + metricsKey), MetadataDirective: s3types.MetadataDirectiveReplace,
			ContentType: aws.String("text/plain"), Metadata: map[string]string{"run": "3", "note": "changed-" + secretNote}}); err != nil {
			t.Fatal(err)
		}
		metaReport := run(t, "verify", copies.Verify)
		onlyOne(t, metaReport, snapshot.StatusDifferent, bucket+"/"+metricsKey, `content type: backup "application/json", target "text/plain"; user metadata differs: note`)
		for _, it := range metaReport.Items {
			if strings.Contains(it.Detail, secretNote) {
				t.Errorf("verify shows a user metadata value: %s", it.Detail)
			}
		}
		clean(t, "a restore of changed metadata", run(t, "restore", copies.Restore), map[string]int{snapshot.StatusUpdated: 1, snapshot.StatusUnchanged: n - 1})
		sameAsBlue(t, "after restoring changed metadata")
		clean(t, "verify after restoring changed metadata", run(t, "verify", copies.Verify), map[string]int{snapshot.StatusIdentical: n})

	}}, step{"a tampered stored copy", func(t *testing.T) {
		// A tampered stored copy (in the middle of the big object, caught while it streams): that
		// object fails and is not left on green; the others are unchanged.
		const bigKey = "v2/artifacts/pipeline-1/run-3/step/output.tgz"
		if _, err := greenMinIO.S3Client().DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(bigKey)}); err != nil {
			t.Fatal(err)
		}
		b := m.Buckets[0]
		tamper(t, store, snapshot.Prefix(backup)+b.Prefix+buckets.EscapeKey(bigKey)+snapshot.EncryptedSuffix)
		report := run(t, "restore from a tampered copy", copies.Restore)
		failed := report.Problems()
		if len(failed) != 1 || failed[0].Name != bucket+"/"+bigKey || failed[0].Status != snapshot.StatusFailed || report.Counts["buckets"][snapshot.StatusUnchanged] != n-1 {
			t.Fatalf("a restore from a tampered copy lists %+v, counts %v; want %s failed and nothing else", failed, report.Counts["buckets"], bigKey)
		}
		t.Logf("tampered copy: %s", failed[0].Detail)
		if _, ok := bucketContents(t, greenMinIO, bucket, "")[bigKey]; ok {
			t.Errorf("the tampered copy of %s was stored on green", bigKey)
		}
	}})
}

// bucketContentsIfAny lists a bucket's keys, none when the bucket does not exist.
func bucketContentsIfAny(ctx context.Context, m *testbed.MinIO, bucket string) map[string]bool {
	out := map[string]bool{}
	list, err := m.S3Client().ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	if err != nil {
		return out
	}
	for _, o := range list.Contents {
		out[*o.Key] = true
	}
	return out
}

// lastModified maps each object of a bucket to its ETag and modification time.
func lastModified(t *testing.T, m *testbed.MinIO, bucket string) map[string]string {
	t.Helper()
	list, err := m.S3Client().ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, o := range list.Contents {
		out[*o.Key] = aws.ToString(o.ETag) + " " + o.LastModified.Format(time.RFC3339Nano)
	}
	return out
}

// bucketConfig is a ferry.yaml that moves namespace and its MinIO's bucket (the workload
// deployment/minio, its keys in the Secret artifact-keys).
func bucketConfig(t *testing.T, namespace, bucket string) string {
	t.Helper()
	config := filepath.Join(t.TempDir(), "ferry.yaml")
	if err := os.WriteFile(config, []byte(`include: {namespaces: [`+namespace+`]}
buckets:
- name: `+bucket+`
  namespace: `+namespace+`
  workload: deployment/minio
  port: 9000
  secret: {name: artifact-keys, accessKeyKey: accesskey, secretKeyKey: secretkey}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	return config
}

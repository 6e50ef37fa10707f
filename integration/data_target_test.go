package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"mime"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/ferrykube/ferry/integration/testbed"
)

// storedObject is what a user checks of an object in a store: its bytes' digest, its content type
// and user metadata, and its tags.
type storedObject struct {
	SHA256, ContentType, Meta, Tags string
}

// storeContents reads every object of a bucket through s3c: key to what a user checks of it.
// User metadata ferry keeps for itself (its SHA-256) is left out.
func storeContents(t *testing.T, s3c *s3.Client, bucket string) map[string]storedObject {
	t.Helper()
	ctx := context.Background()
	out := map[string]storedObject{}
	p := s3.NewListObjectsV2Paginator(s3c, &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Fatalf("list bucket %s: %v", bucket, err)
		}
		for _, o := range page.Contents {
			got, err := s3c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: o.Key})
			if err != nil {
				t.Fatalf("get %s: %v", *o.Key, err)
			}
			data, err := io.ReadAll(got.Body)
			got.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(data)
			var meta []string
			for k, v := range got.Metadata {
				if !strings.EqualFold(k, "ferry-sha256") {
					meta = append(meta, strings.ToLower(k)+"="+v)
				}
			}
			slices.Sort(meta)
			tags, err := s3c.GetObjectTagging(ctx, &s3.GetObjectTaggingInput{Bucket: aws.String(bucket), Key: o.Key})
			if err != nil {
				t.Fatalf("tags of %s: %v", *o.Key, err)
			}
			var tagList []string
			for _, tag := range tags.TagSet {
				tagList = append(tagList, *tag.Key+"="+*tag.Value)
			}
			slices.Sort(tagList)
			out[*o.Key] = storedObject{SHA256: hex.EncodeToString(sum[:]), ContentType: aws.ToString(got.ContentType),
				Meta: strings.Join(meta, ","), Tags: strings.Join(tagList, ",")}
		}
	}
	return out
}

// TestDataKeptElsewhereOnTheTarget: green's new release keeps the platform's data in other
// servers than blue's: its objects in SeaweedFS in place of MinIO (Kubeflow's releases after
// 1.11), its database in a workload of another name with credentials of its own. ferry.yaml's
// target sections say where; a restore puts blue's objects and rows there, verify reads them
// there and names an object changed since, and a copy the other way (a carry-back's: green's
// data with the sections reversed) gives blue green's data where blue keeps it. What a user
// checks is read straight from each server. Without the sections, the restore fails naming
// the workload green does not run, and changes nothing.
func TestDataKeptElsewhereOnTheTarget(t *testing.T) {
	testbed.Require(t, tb)
	weed := tb.SeaweedFS["green"]
	if weed == nil {
		t.Fatal("the testbed runs no SeaweedFS named green")
	}
	ctx := context.Background()
	const blueNS, greenNS, bucket, schema = "store-blue", "store-green", "store-target", "store_target"
	blue, blueKC := clients(t, "blue")
	green, greenKC := clients(t, "green")
	blueDB, greenDB, blueS3 := tb.MariaDB["blue"], tb.MariaDB["green"], tb.MinIO["blue"]
	cleanup := func() {
		removeNamespace(t, blueNS, blueKC)
		removeNamespace(t, greenNS, greenKC)
		for _, db := range []*testbed.MariaDB{blueDB, greenDB} {
			if _, err := db.SQL(ctx, tb.Bins, "DROP DATABASE IF EXISTS "+schema); err != nil {
				t.Logf("drop %s: %v", schema, err)
			}
		}
		for _, s3c := range []*s3.Client{blueS3.S3Client(), weed.S3Client()} {
			if err := testbed.RemoveBucket(ctx, s3c, bucket); err != nil {
				t.Logf("remove bucket %s: %v", bucket, err)
			}
		}
	}
	cleanup()
	t.Cleanup(cleanup)

	// Blue: MinIO and MariaDB as the old release runs them.
	pod := serveWorkload(t, blueKC, blueNS, "minio", "artifact-keys", map[string]string{"accesskey": blueS3.AccessKey, "secretkey": blueS3.SecretKey})
	if err := blue.MapPortForward(ctx, blueNS, pod, 9000, "127.0.0.1", blueS3.Port); err != nil {
		t.Fatal(err)
	}
	pod = serveWorkload(t, blueKC, blueNS, "mysql", "mysql-secret", map[string]string{"username": blueDB.User, "password": blueDB.Password})
	if err := blue.MapExec(ctx, blueNS, pod, blueDB.ClientHome, blueDB.Env()); err != nil {
		t.Fatal(err)
	}
	// Green: SeaweedFS with its own keys, the database in a workload of another name whose
	// Secret has other keys.
	pod = serveWorkload(t, greenKC, greenNS, "seaweedfs", "weed-keys", map[string]string{"AWS_ACCESS_KEY_ID": weed.AccessKey, "AWS_SECRET_ACCESS_KEY": weed.SecretKey})
	if err := green.MapPortForward(ctx, greenNS, pod, 8333, "127.0.0.1", weed.Port); err != nil {
		t.Fatal(err)
	}
	pod = serveWorkload(t, greenKC, greenNS, "kfp-db", "kfp-db-creds", map[string]string{"user": greenDB.User, "pass": greenDB.Password})
	if err := green.MapExec(ctx, greenNS, pod, greenDB.ClientHome, greenDB.Env()); err != nil {
		t.Fatal(err)
	}

	// Blue's data: objects of several shapes, rows.
	if err := blueS3.CreateBucket(ctx, bucket); err != nil {
		t.Fatal(err)
	}
	// Settings a platform's bucket has: versions kept, scratch files expire, tags for cost reports,
	// anyone may read the published pipelines.
	s3c := blueS3.S3Client()
	if _, err := s3c.PutBucketVersioning(ctx, &s3.PutBucketVersioningInput{Bucket: aws.String(bucket),
		VersioningConfiguration: &s3types.VersioningConfiguration{Status: s3types.BucketVersioningStatusEnabled}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s3c.PutBucketLifecycleConfiguration(ctx, &s3.PutBucketLifecycleConfigurationInput{Bucket: aws.String(bucket),
		LifecycleConfiguration: &s3types.BucketLifecycleConfiguration{Rules: []s3types.LifecycleRule{{ID: aws.String("scratch"), Status: s3types.ExpirationStatusEnabled,
			Filter: &s3types.LifecycleRuleFilter{Prefix: aws.String("scratch/")}, Expiration: &s3types.LifecycleExpiration{Days: aws.Int32(3)}}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s3c.PutBucketTagging(ctx, &s3.PutBucketTaggingInput{Bucket: aws.String(bucket),
		Tagging: &s3types.Tagging{TagSet: []s3types.Tag{{Key: aws.String("team"), Value: aws.String("ml")}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s3c.PutBucketPolicy(ctx, &s3.PutBucketPolicyInput{Bucket: aws.String(bucket), Policy: aws.String(
		`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":["*"]},"Action":["s3:GetObject"],"Resource":["arn:aws:s3:::` + bucket + `/pipelines/*"]}]}`)}); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("pipeline artifact\n"), 400_000) // 7 MB: a multipart upload
	for key, in := range map[string]*s3.PutObjectInput{
		"v2/artifacts/run-1/model.bin":    {Body: bytes.NewReader(big), ContentType: aws.String("application/octet-stream")},
		"v2/artifacts/run-1/metrics.json": {Body: strings.NewReader(`{"accuracy": 0.93}`), ContentType: aws.String("application/json"), Metadata: map[string]string{"run": "run-1"}},
		"v2/artifacts/run-2/empty":        {Body: bytes.NewReader(nil)},
		"pipelines/hello.yaml":            {Body: strings.NewReader("kind: Pipeline\n"), ContentType: aws.String("application/x-yaml"), Tagging: aws.String("team=ml&stage=prod")},
		"a key with spaces & signs+=.txt": {Body: strings.NewReader("odd key\n")},
	} {
		in.Bucket, in.Key = aws.String(bucket), aws.String(key)
		if _, err := blueS3.S3Client().PutObject(ctx, in); err != nil {
			t.Fatalf("put %s on blue: %v", key, err)
		}
	}
	if _, err := blueDB.SQL(ctx, tb.Bins, `CREATE DATABASE `+schema+`; CREATE TABLE `+schema+`.runs (id INT PRIMARY KEY, name VARCHAR(64), state VARCHAR(16));
INSERT INTO `+schema+`.runs VALUES (1, 'train', 'Succeeded'), (2, 'eval', 'Failed'), (3, 'serve', 'Running');`); err != nil {
		t.Fatal(err)
	}
	rows := func(db *testbed.MariaDB) string {
		t.Helper()
		out, err := db.SQL(ctx, tb.Bins, "SELECT id, name, state FROM "+schema+".runs ORDER BY id")
		if err != nil {
			t.Fatal(err)
		}
		return out
	}

	url := backupMinIO(t, "data-target")
	configFile := func(name, content string) string {
		t.Helper()
		f := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(f, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}
	source := `
databases:
- name: kfp-db
  engine: mysql
  namespace: %[1]s
  workload: deployment/mysql
  secret: {name: mysql-secret, userKey: username, passwordKey: password}
  schemas: [` + schema + `]
%[3]s
buckets:
- name: ` + bucket + `
  namespace: %[1]s
  workload: deployment/minio
  port: 9000
  secret: {name: artifact-keys, accessKeyKey: accesskey, secretKeyKey: secretkey}
%[4]s
include: {namespaces: [%[1]s], resources: [configmaps]}
namespaceMap: {%[1]s: %[2]s}
`
	dbTarget := `  target:
    workload: deployment/kfp-db
    secret: {name: kfp-db-creds, userKey: user, passwordKey: pass}`
	bucketTarget := `  target:
    workload: deployment/seaweedfs
    port: 8333
    secret: {name: weed-keys, accessKeyKey: AWS_ACCESS_KEY_ID, secretKeyKey: AWS_SECRET_ACCESS_KEY}`
	ferry := func(want int, args ...string) string {
		t.Helper()
		code, out, errOut := runFerry(t, append([]string{"--storage", url}, args...)...)
		if code != want {
			t.Fatalf("ferry %s exited %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, want, out, errOut)
		}
		return out + errOut
	}

	// Without the target sections green has neither blue's workloads, nor does the restore make
	// them: the plan's preflight blocks, and the restore fails, each naming them.
	plain, targeted := configFile("plain.yaml", fmt.Sprintf(source, blueNS, greenNS, "", "")), configFile("target.yaml", fmt.Sprintf(source, blueNS, greenNS, dbTarget, bucketTarget))
	out := ferry(3, "plan", "--from", "blue", "--to", "green", "-f", plain)
	for _, want := range []string{"the target runs no deployment/minio in namespace " + greenNS, "the target runs no deployment/mysql in namespace " + greenNS} {
		if !strings.Contains(out, want) {
			t.Errorf("the plan without target sections does not say %q:\n%s", want, out)
		}
	}
	ferry(0, "backup", "--from", "blue", "-f", plain, "--name", "data-target-plain")
	out = ferry(3, "restore", "--to", "green", "--backup", "data-target-plain")
	for _, want := range []string{"no deployment/minio in namespace " + greenNS, "no deployment/mysql in namespace " + greenNS} {
		if !strings.Contains(out, want) {
			t.Errorf("the restore without target sections does not say %q:\n%s", want, out)
		}
	}

	// A backup made without them (a schedule's, before green ran its own servers) is restored
	// there with the sections given to the restore: a disaster recovery onto the new release.
	ferry(0, "restore", "--to", "green", "--backup", "data-target-plain", "--data-targets", targeted)
	ferry(0, "verify", "--to", "green", "--backup", "data-target-plain", "--data-targets", targeted)
	if b, g := rows(blueDB), rows(greenDB); b != g {
		t.Fatalf("green's database holds\n%s\nwant blue's\n%s", g, b)
	}
	if out := ferry(2, "restore", "--to", "green", "--backup", "data-target-plain", "--data-targets",
		configFile("typo.yaml", "buckets:\n- {name: store-targt, endpoint: 'http://127.0.0.1:1', target: {endpoint: 'http://127.0.0.1:2'}}\n")); !strings.Contains(out, `the backup holds no bucket "store-targt"`) {
		t.Errorf("a target section of a bucket the backup lacks is not refused by name:\n%s", out)
	}

	// With them, blue's data lands in green's own servers, as a user reading them finds.
	wantObjects := storeContents(t, blueS3.S3Client(), bucket)
	if len(wantObjects) != 5 {
		t.Fatalf("blue's bucket holds %d objects, want 5", len(wantObjects))
	}
	if out := ferry(0, "plan", "--from", "blue", "--to", "green", "-f", targeted); !strings.Contains(out, "(target: "+greenNS+"/deployment/seaweedfs:8333)") {
		t.Errorf("the plan does not show where green keeps the bucket:\n%s", out)
	}
	ferry(0, "backup", "--from", "blue", "-f", targeted, "--name", "data-target")
	ferry(0, "restore", "--to", "green", "--backup", "data-target")
	// An object of the store's default content type has none of its own: SeaweedFS serves its
	// own guess from the key (text/plain for .txt), as it would for a release writing it there.
	gotObjects := storeContents(t, weed.S3Client(), bucket)
	for key, o := range gotObjects {
		if want, ok := wantObjects[key]; ok && want.ContentType == "application/octet-stream" && o.ContentType == mime.TypeByExtension(path.Ext(key)) {
			o.ContentType = want.ContentType
			gotObjects[key] = o
		}
	}
	if !maps.Equal(gotObjects, wantObjects) {
		t.Fatalf("green's SeaweedFS holds\n%v\nwant blue's\n%v", gotObjects, wantObjects)
	}
	if b, g := rows(blueDB), rows(greenDB); b != g {
		t.Fatalf("green's database holds\n%s\nwant blue's\n%s", g, b)
	}
	if b, g := bucketSettings(t, blueS3.S3Client(), bucket), bucketSettings(t, weed.S3Client(), bucket); !maps.Equal(b, g) {
		t.Errorf("green's bucket has the settings\n%v\nwant blue's\n%v", g, b)
	}
	ferry(0, "verify", "--to", "green", "--backup", "data-target")
	if _, err := weed.S3Client().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("pipelines/hello.yaml"),
		Body: strings.NewReader("kind: Pipeline # edited on green\n")}); err != nil {
		t.Fatal(err)
	}
	if out := ferry(3, "verify", "--to", "green", "--backup", "data-target"); !strings.Contains(out, "pipelines/hello.yaml") {
		t.Errorf("verify does not name the object changed on green:\n%s", out)
	}

	// The way back: green's writes, backed up where green keeps them and restored where blue
	// keeps them, as a carry-back's configuration (the sections reversed) says.
	if _, err := greenDB.SQL(ctx, tb.Bins, `INSERT INTO `+schema+`.runs VALUES (4, 'retrain', 'Succeeded'); UPDATE `+schema+`.runs SET state = 'Succeeded' WHERE id = 3;`); err != nil {
		t.Fatal(err)
	}
	if _, err := weed.S3Client().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("v2/artifacts/run-4/model.bin"),
		Body: strings.NewReader("green's model\n"), ContentType: aws.String("application/octet-stream")}); err != nil {
		t.Fatal(err)
	}
	reversed := `
databases:
- name: kfp-db
  engine: mysql
  namespace: ` + greenNS + `
  workload: deployment/kfp-db
  secret: {name: kfp-db-creds, userKey: user, passwordKey: pass}
  schemas: [` + schema + `]
  target:
    namespace: ` + blueNS + `
    workload: deployment/mysql
    secret: {name: mysql-secret, userKey: username, passwordKey: password}
buckets:
- name: ` + bucket + `
  namespace: ` + greenNS + `
  workload: deployment/seaweedfs
  port: 8333
  secret: {name: weed-keys, accessKeyKey: AWS_ACCESS_KEY_ID, secretKeyKey: AWS_SECRET_ACCESS_KEY}
  versions: current # the object edited on green left an earlier version there, which does not go back
  target:
    namespace: ` + blueNS + `
    workload: deployment/minio
    port: 9000
    secret: {name: artifact-keys, accessKeyKey: accesskey, secretKeyKey: secretkey}
include: {namespaces: [` + greenNS + `], resources: [configmaps]}
namespaceMap: {` + greenNS + `: ` + blueNS + `}
`
	ferry(0, "backup", "--from", "green", "-f", configFile("reversed.yaml", reversed), "--name", "data-target-back")
	ferry(0, "restore", "--to", "blue", "--backup", "data-target-back", "--existing", "update")
	greenObjects := storeContents(t, weed.S3Client(), bucket)
	if got := storeContents(t, blueS3.S3Client(), bucket); !maps.Equal(got, greenObjects) {
		t.Fatalf("after the way back blue's MinIO holds\n%v\nwant green's\n%v", got, greenObjects)
	}
	if b, g := rows(blueDB), rows(greenDB); b != g {
		t.Fatalf("after the way back blue's database holds\n%s\nwant green's\n%s", b, g)
	}

	// A later backup of SeaweedFS copies only what changed since (a schedule's), and restores
	// exactly.
	if _, err := weed.S3Client().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("v2/artifacts/run-1/metrics.json"),
		Body: strings.NewReader(`{"accuracy": 0.95}`), ContentType: aws.String("application/json"), Metadata: map[string]string{"run": "run-1b"}}); err != nil {
		t.Fatal(err)
	}
	ferry(0, "backup", "--from", "green", "-f", configFile("reversed.yaml", reversed), "--name", "data-target-back-2")
	_, m := readManifest(t, url, "data-target-back-2")
	if len(m.Buckets) != 1 {
		t.Fatalf("the second backup of green holds %d buckets, want 1", len(m.Buckets))
	}
	if m.Buckets[0].Reused != len(m.Buckets[0].Objects)-1 || m.Buckets[0].ReusedFrom != "data-target-back" {
		t.Errorf("the second backup of SeaweedFS copied again objects that had not changed: %d of %d reused from %q, want all but the one changed, from data-target-back",
			m.Buckets[0].Reused, len(m.Buckets[0].Objects), m.Buckets[0].ReusedFrom)
	}
	t.Logf("the second backup of SeaweedFS reused %d of %d objects from %s", m.Buckets[0].Reused, len(m.Buckets[0].Objects), m.Buckets[0].ReusedFrom)
	ferry(0, "restore", "--to", "blue", "--backup", "data-target-back-2", "--existing", "update")
	if got, want := storeContents(t, blueS3.S3Client(), bucket), storeContents(t, weed.S3Client(), bucket); !maps.Equal(got, want) {
		t.Fatalf("after the second backup's restore blue's MinIO holds\n%v\nwant green's\n%v", got, want)
	}
}

package integration

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/ferrykube/ferry/integration/testbed"
	"github.com/ferrykube/ferry/snapshot"
)

// TestBucketBackupNamesEarlierVersions backs up a versioned bucket of blue's MinIO that holds
// history: one object overwritten once, one deleted (its bytes an earlier version under a delete
// marker), one plain. The backup copies each object's current version only, so it lists the
// bucket's earlier versions as skipped, with their counts, and exits 3; the same with versioning
// suspended, which keeps the versions already made. With `versions: current` on the bucket the
// operator accepts that: the backup exits 0 and only its log names the counts.
func TestBucketBackupNamesEarlierVersions(t *testing.T) {
	testbed.Require(t, tb)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const ns, bucket = "bucket-versions", "bv-artifacts"
	const plain, overwritten, deleted = "plain.txt", "models/model.bin", "runs/gone.json"
	serveMinIO(t, "blue", ns)
	blueMinIO := tb.MinIO["blue"]
	blue := blueMinIO.S3Client()
	if err := blueMinIO.CreateBucket(ctx, bucket); err != nil {
		t.Fatal(err)
	}
	setVersioning := func(status s3types.BucketVersioningStatus) {
		t.Helper()
		if _, err := blue.PutBucketVersioning(ctx, &s3.PutBucketVersioningInput{Bucket: aws.String(bucket),
			VersioningConfiguration: &s3types.VersioningConfiguration{Status: status}}); err != nil {
			t.Fatalf("versioning %s: %v", status, err)
		}
	}
	setVersioning(s3types.BucketVersioningStatusEnabled)
	put := func(key, body string) {
		t.Helper()
		if _, err := blue.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader(body)}); err != nil {
			t.Fatalf("put %s: %v", key, err)
		}
	}
	put(plain, "plain")
	put(overwritten, "model v1")
	put(overwritten, "model v2") // v1 is an earlier version now
	put(deleted, `{"run": 1}`)
	if _, err := blue.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(deleted)}); err != nil {
		t.Fatalf("delete %s: %v", deleted, err)
	}
	// The history as the store itself lists it: model v1 and the deleted object's bytes are
	// earlier versions, and the deletion left one delete marker.
	const earlier, markers = 2, 1
	if e, d := storedHistory(t, ctx, blue, bucket); e != earlier || d != markers {
		t.Fatalf("blue's %s holds %d earlier versions and %d delete markers; the test means %d and %d", bucket, e, d, earlier, markers)
	}

	config := bucketConfig(t, ns, bucket)
	url := backupMinIO(t, "bucketversions")
	item := bucket + " earlier versions"
	// skipsHistory backs the bucket up as backup with config and checks that the backup lists
	// the history it does not hold, with its counts, and exits 3.
	skipsHistory := func(t *testing.T, config, backup string) {
		t.Helper()
		code, out, errOut := runFerry(t, "--storage", url, "backup", "--from", "blue", "-f", config, "--name", backup)
		if code != 3 {
			t.Fatalf("ferry backup of a bucket with earlier versions and delete markers: exit %d, want 3 (the history listed as skipped)\nstdout: %.3000s\nstderr: %.3000s", code, out, errOut)
		}
		t.Logf("ferry backup exited 3\nstdout: %.3000s", out)
		var line string
		for l := range strings.Lines(out) {
			if strings.Contains(l, "bucket "+item+":") {
				line = l
			}
		}
		if !strings.Contains(line, "2 earlier versions") || !strings.Contains(line, "1 delete marker") {
			t.Errorf("the backup's report does not name %s's %d earlier versions and %d delete marker: %q\nstdout: %.3000s", bucket, earlier, markers, line, out)
		}
		_, m := readManifest(t, url, backup)
		var skipped []snapshot.Skipped
		for _, s := range m.Skipped {
			if s.Kind == "bucket" && strings.HasPrefix(s.Name, bucket) {
				skipped = append(skipped, s)
			}
		}
		if len(skipped) != 1 || skipped[0].Name != item || !strings.Contains(skipped[0].Reason, "2 earlier versions") {
			t.Errorf("the manifest lists as skipped %+v; want only %q with its counts", skipped, item)
		}
		if len(m.Buckets) != 1 || len(m.Buckets[0].Objects) != 2 {
			t.Errorf("the backup's buckets: %+v; want %s with its 2 current objects", m.Buckets, bucket)
		}
	}

	runSteps(t, step{"the backup lists the history it does not hold and exits 3", func(t *testing.T) {
		skipsHistory(t, config, "bucket-versions")
	}}, step{"versions: current backs up the current versions and exits 0", func(t *testing.T) {
		// bucketConfig's bucket is the file's last entry: the setting joins it.
		data, err := os.ReadFile(config)
		if err != nil {
			t.Fatal(err)
		}
		current := strings.TrimSuffix(config, ".yaml") + "-current.yaml"
		if err := os.WriteFile(current, append(data, "  versions: current\n"...), 0o644); err != nil {
			t.Fatal(err)
		}
		const backup = "bucket-versions-current"
		code, out, errOut := runFerry(t, "--storage", url, "backup", "--from", "blue", "-f", current, "--name", backup)
		if code != 0 {
			t.Fatalf("ferry backup with versions: current exited %d, want 0\nstdout: %.3000s\nstderr: %.3000s", code, out, errOut)
		}
		if strings.Contains(out, "earlier versions") {
			t.Errorf("with versions: current the report still lists the earlier versions:\n%.3000s", out)
		}
		// The log still says what the backup does not hold.
		if !strings.Contains(errOut, "earlier versions") || !strings.Contains(errOut, "earlierVersions=2") || !strings.Contains(errOut, "deleteMarkers=1") {
			t.Errorf("with versions: current the log does not name the %d earlier versions and %d delete marker:\n%.3000s", earlier, markers, errOut)
		}
		if _, m := readManifest(t, url, backup); len(m.Skipped) != 0 {
			t.Errorf("with versions: current the manifest lists as skipped %+v", m.Skipped)
		}
	}}, step{"a bucket whose versioning is suspended keeps its history: the backup lists it", func(t *testing.T) {
		setVersioning(s3types.BucketVersioningStatusSuspended)
		skipsHistory(t, config, "bucket-versions-suspended")
	}})
}

// storedHistory counts a bucket's earlier (noncurrent) object versions and its delete markers
// through the S3 API.
func storedHistory(t *testing.T, ctx context.Context, c *s3.Client, bucket string) (earlier, markers int) {
	t.Helper()
	p := s3.NewListObjectVersionsPaginator(c, &s3.ListObjectVersionsInput{Bucket: aws.String(bucket)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Fatalf("versions of %s: %v", bucket, err)
		}
		for _, v := range page.Versions {
			if !aws.ToBool(v.IsLatest) {
				earlier++
			}
		}
		markers += len(page.DeleteMarkers)
	}
	return earlier, markers
}

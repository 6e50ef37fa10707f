package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/ferrykube/ferry/integration/testbed"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/snapshot/buckets"
	"github.com/ferrykube/ferry/storage"
)

// TestBucketBackupsCopyOnlyWhatChanged backs up blue's platform bucket three times, into S3 and
// into file storage: the second backup after one object was rewritten, one deleted and one added,
// the third after nothing changed. A backup reads from the store only the objects it lists
// differently from the backup before (size, ETag, time) and copies the others' files in the
// storage. Checked independently of ferry: every file each backup stored holds the bytes the
// store holds for its key (read from blue's MinIO directly), a reused object keeps its metadata,
// and the second backup's files outlive the deletion of the first.
func TestBucketBackupsCopyOnlyWhatChanged(t *testing.T) {
	blueMinIO(t)
	ctx := context.Background()
	s3c := tb.MinIO["blue"].S3Client()
	bucket := testbed.PlatformBucket
	put := func(key, body string, meta map[string]string) {
		t.Helper()
		in := &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader(body), Metadata: meta}
		if meta != nil {
			in.ContentType = aws.String("text/plain")
		}
		if _, err := s3c.PutObject(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	del := func(key string) {
		t.Helper()
		if _, err := s3c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)}); err != nil {
			t.Fatal(err)
		}
	}
	const dir = "zz-incremental/"
	t.Cleanup(func() {
		for _, k := range []string{"kept.txt", "changes.txt", "goes.txt", "comes.txt"} {
			s3c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(dir + k)})
		}
	})
	storages := map[string]string{"s3": backupMinIO(t, "incremental-buckets"), "file": "file://" + t.TempDir()}
	for _, kind := range []string{"s3", "file"} {
		t.Run(kind, func(t *testing.T) {
			url := storages[kind]
			put(dir+"kept.txt", "kept, with metadata", map[string]string{"owner": "team-a"})
			put(dir+"changes.txt", "the first version", nil)
			put(dir+"goes.txt", "deleted after the first backup", nil)
			defer del(dir + "comes.txt")
			backup := func(name string) (storage.Backend, snapshot.Bucket) {
				t.Helper()
				code, out, errOut := runFerry(t, "--storage", url, "backup", "--from", "blue", "--preset", "kubeflow", "--name", name)
				if code != 0 && code != 3 {
					t.Fatalf("ferry backup %s exited %d\nstdout: %s\nstderr: %s", name, code, out, errOut)
				}
				store, m := readManifest(t, url, name)
				for _, b := range m.Buckets {
					if b.Name == bucket {
						checkStoredBucket(t, store, name, b, bucket)
						return store, b
					}
				}
				t.Fatalf("backup %s holds no bucket %s: %+v", name, bucket, m.Skipped)
				return nil, snapshot.Bucket{}
			}
			first, second, third := "incr-"+kind+"-1", "incr-"+kind+"-2", "incr-"+kind+"-3"
			_, b1 := backup(first)
			if b1.Reused != 0 { // the storage is new: nothing to copy from
				t.Errorf("the first backup reused %d objects from %s", b1.Reused, b1.ReusedFrom)
			}
			for _, o := range b1.Objects {
				if o.ETag == "" || o.Modified.IsZero() {
					t.Errorf("the first backup recorded no ETag or time of %q", o.Key)
				}
			}

			put(dir+"changes.txt", "the second version, longer", nil)
			del(dir + "goes.txt")
			put(dir+"comes.txt", "added after the first backup", nil)
			store, b2 := backup(second)
			var unchanged int64
			n := 0
			for _, o := range b2.Objects {
				if o.Key != dir+"changes.txt" && o.Key != dir+"comes.txt" {
					unchanged += o.Size
					n++
				}
			}
			t.Logf("second backup: %d objects, %d reused (%d bytes) from %s", len(b2.Objects), b2.Reused, b2.ReusedBytes, b2.ReusedFrom)
			if b2.Reused != n || b2.ReusedBytes != unchanged || b2.ReusedFrom != first {
				t.Errorf("the second backup reused %d objects (%d bytes) from %q; want the %d unchanged (%d bytes) from %s", b2.Reused, b2.ReusedBytes, b2.ReusedFrom, n, unchanged, first)
			}
			var meta map[string]snapshot.ObjectMetadata
			if err := json.Unmarshal(readStored(t, store, second, b2.Metadata, nil), &meta); err != nil {
				t.Fatal(err)
			}
			if m := meta[dir+"kept.txt"]; m.ContentType != "text/plain" || m.User["owner"] != "team-a" {
				t.Errorf("the reused object's metadata: %+v", m)
			}

			if code, out, errOut := runFerry(t, "--storage", url, "backups", "delete", first); code != 0 {
				t.Fatalf("ferry backups delete %s exited %d\nstdout: %s\nstderr: %s", first, code, out, errOut)
			}
			checkStoredBucket(t, store, second, b2, bucket)

			_, b3 := backup(third)
			if b3.Reused != len(b3.Objects) || b3.ReusedFrom != second {
				t.Errorf("the third backup, nothing changed, reused %d of %d objects from %q; want all from %s", b3.Reused, len(b3.Objects), b3.ReusedFrom, second)
			}
		})
	}
}

// checkStoredBucket compares what backup stored of the bucket with what the store holds now, read
// directly from blue's MinIO: the same keys, and each stored file the object's bytes.
func checkStoredBucket(t *testing.T, store storage.Backend, backup string, b snapshot.Bucket, bucket string) {
	t.Helper()
	ctx := context.Background()
	live := bucketContents(t, tb.MinIO["blue"], bucket, "")
	if len(b.Objects) != len(live) {
		t.Errorf("backup %s holds %d objects of %s, the store %d", backup, len(b.Objects), bucket, len(live))
	}
	for _, o := range b.Objects {
		want, ok := live[o.Key]
		if !ok {
			t.Errorf("backup %s holds %q, which the store does not", backup, o.Key)
			continue
		}
		stored, _ := buckets.StoredName(o.Key)
		rc, err := store.Get(ctx, snapshot.Prefix(backup)+b.Prefix+stored)
		if err != nil {
			t.Errorf("backup %s: %q: %v", backup, o.Key, err)
			continue
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("backup %s: the stored file of %q differs from the store's object (%d bytes, want %d; %v)", backup, o.Key, len(got), len(want), err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

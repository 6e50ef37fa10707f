package integration

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	neturl "net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/ferrykube/ferry/integration/testbed"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/snapshot/buckets"
	"github.com/ferrykube/ferry/storage"
)

// checkedBackup is an unencrypted backup of one bucket of blue's MinIO, whose stored copies a test
// damages, and what restores it onto green's MinIO.
type checkedBackup struct {
	bucket, backup string
	store          storage.Backend
	manifest       *snapshot.Manifest
	copies         buckets.Copies
}

// backUpCheckedBucket makes bucket on blue's MinIO with objects, backs it up unencrypted as the
// backup name, and empties green's bucket of that name (made when missing).
func backUpCheckedBucket(t *testing.T, ctx context.Context, blueNS, greenNS, bucket, backup string, objects map[string][]byte) *checkedBackup {
	t.Helper()
	serveMinIO(t, "blue", blueNS)
	serveMinIO(t, "green", greenNS)
	blueMinIO, greenMinIO := tb.MinIO["blue"], tb.MinIO["green"]
	if err := blueMinIO.CreateBucket(ctx, bucket); err != nil {
		t.Fatal(err)
	}
	for key, data := range objects {
		if _, err := blueMinIO.S3Client().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(data)}); err != nil {
			t.Fatalf("put %q: %v", key, err)
		}
	}
	if err := greenMinIO.CreateBucket(ctx, bucket); err != nil {
		t.Fatal(err)
	}
	for key := range bucketContentsIfAny(ctx, greenMinIO, bucket) {
		greenMinIO.S3Client().DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	}
	config := bucketConfig(t, blueNS, bucket)
	url := backupMinIO(t, backup)
	if code, out, errOut := runFerry(t, "--storage", url, "backup", "--from", "blue", "-f", config, "--name", backup); code != 0 {
		t.Fatalf("ferry backup exited %d\nstdout: %.2000s\nstderr: %.2000s", code, out, errOut)
	}
	store, m := readManifest(t, url, backup)
	if len(m.Buckets) != 1 || len(m.Buckets[0].Objects) != len(objects) {
		t.Fatalf("the backup's buckets: %+v", m.Buckets)
	}
	greenCluster, greenKC := clients(t, "green")
	cfg, err := greenCluster.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	return &checkedBackup{bucket: bucket, backup: backup, store: store, manifest: m,
		copies: buckets.Copies{Config: cfg, Client: greenKC, Parallel: 4, Mapping: snapshot.Mapping{Namespaces: map[string]string{blueNS: greenNS}}}}
}

// storedKey is the storage key of the stored copy of the bucket's object key.
func (b *checkedBackup) storedKey(key string) string {
	return snapshot.Prefix(b.backup) + b.manifest.Buckets[0].Prefix + buckets.EscapeKey(key)
}

// replaceStored writes data as the stored copy of the bucket's object key.
func (b *checkedBackup) replaceStored(t *testing.T, key string, data []byte) {
	t.Helper()
	if err := b.store.Put(context.Background(), b.storedKey(key), bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
}

// run restores (or verifies, with fn) the backup with copies and returns the report.
func (b *checkedBackup) run(t *testing.T, ctx context.Context, fn func(context.Context, *snapshot.Reader, *snapshot.Report) error) *snapshot.Report {
	t.Helper()
	r, err := snapshot.Open(ctx, b.store, b.backup, nil)
	if err != nil {
		t.Fatal(err)
	}
	var report snapshot.Report
	if err := fn(ctx, r, &report); err != nil {
		t.Fatal(err)
	}
	t.Logf("counts %v, items %+v", report.Counts["buckets"], report.Items)
	return &report
}

// putGreen writes an object of green's bucket.
func putGreen(t *testing.T, ctx context.Context, bucket, key string, data []byte) {
	t.Helper()
	if _, err := tb.MinIO["green"].S3Client().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(data)}); err != nil {
		t.Fatalf("put green's %q: %v", key, err)
	}
}

// TestBucketRestoreChecksBeforeItReplaces: a restore replaces or deletes nothing on the target
// before the backup's stored copy is checked. A damaged stored copy of an empty object (a "dir/"
// marker, whose upload reads nothing) leaves the target's own object at that key as it is; an
// exact restore (carry-back, warm rounds) whose puts did not all succeed deletes none of the
// target's extra objects, and lists them.
func TestBucketRestoreChecksBeforeItReplaces(t *testing.T) {
	testbed.Require(t, tb)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const marker, alpha, bravo, extra = "dir/", "dir/alpha.txt", "bravo.txt", "green/extra.txt"
	objects := map[string][]byte{marker: {}, alpha: []byte("alpha from blue"), bravo: []byte("bravo from blue")}
	b := backUpCheckedBucket(t, ctx, "bucket-checks", "bucket-checks-green", "ck-artifacts", "bucket-checks", objects)
	green := tb.MinIO["green"]
	greensMarker := []byte("green's own object at the marker's key")

	runSteps(t, step{"a damaged stored copy of an empty object", func(t *testing.T) {
		putGreen(t, ctx, b.bucket, marker, greensMarker)
		b.replaceStored(t, marker, []byte("not empty"))
		defer b.replaceStored(t, marker, nil)
		report := b.run(t, ctx, b.copies.Restore)
		failed := report.Problems()
		if len(failed) != 1 || failed[0].Name != b.bucket+"/"+marker || failed[0].Status != snapshot.StatusFailed {
			t.Errorf("a restore from a damaged copy of %s lists %+v; want it failed and nothing else", marker, failed)
		}
		got, ok := bucketContents(t, green, b.bucket, "")[marker]
		if !ok || !bytes.Equal(got, greensMarker) {
			t.Fatalf("green's own object at %s was replaced or deleted by a restore from a damaged copy: there %v, %d bytes (had %d)", marker, ok, len(got), len(greensMarker))
		}
		if len(failed) == 1 && strings.Contains(failed[0].Detail, "deleted") {
			t.Errorf("the failure says an object was deleted: %s", failed[0].Detail)
		}

	}}, step{"an exact restore whose puts fail deletes nothing", func(t *testing.T) {
		putGreen(t, ctx, b.bucket, extra, []byte("green only"))
		putGreen(t, ctx, b.bucket, alpha, []byte("green's alpha"))
		tamper(t, b.store, b.storedKey(alpha))
		exact := b.copies
		exact.Exact = true
		report := b.run(t, ctx, exact.Restore)
		if _, ok := bucketContents(t, green, b.bucket, "")[extra]; !ok {
			t.Errorf("an exact restore deleted green's %s although the put of %s failed", extra, alpha)
		}
		byName := map[string]snapshot.ReportItem{}
		for _, it := range report.Problems() {
			byName[it.Name] = it
		}
		if it := byName[b.bucket+"/"+alpha]; it.Status != snapshot.StatusFailed {
			t.Errorf("%s is listed %+v; want failed", alpha, it)
		}
		if it := byName[b.bucket+"/"+extra]; it.Status != snapshot.StatusSkipped && it.Status != snapshot.StatusFailed {
			t.Errorf("green's extra %s is listed %+v; want it skipped (left, not deleted)", extra, it)
		}
		if n := report.Counts["buckets"][snapshot.StatusDeleted]; n != 0 {
			t.Errorf("an exact restore with a failed put counts %d deleted", n)
		}

		// The stored copy whole again: the exact restore puts it and then deletes the extra.
		b.replaceStored(t, alpha, objects[alpha])
		report = b.run(t, ctx, exact.Restore)
		if items := report.Problems(); len(items) != 1 || items[0].Name != b.bucket+"/"+extra || items[0].Status != snapshot.StatusDeleted {
			t.Errorf("an exact restore from whole copies lists %+v; want only %s deleted", items, extra)
		}
		got := bucketContents(t, green, b.bucket, "")
		if want := slices.Sorted(maps.Keys(objects)); !slices.Equal(slices.Sorted(maps.Keys(got)), want) || !bytes.Equal(got[alpha], objects[alpha]) {
			t.Errorf("after an exact restore green holds %v; want %v with blue's bytes", slices.Sorted(maps.Keys(got)), want)
		}
	}})
}

// tagsGate is a proxy in front of a testbed MinIO that answers some reads of objects' tags as a
// store does that will not give them: AccessDenied for the keys under denied (a read-only
// credential without s3:GetObjectTagging), and SlowDown for the first busy reads of the key slow
// (a loaded store: more than the S3 client retries on its own). Everything else passes through.
type tagsGate struct {
	bucket, denied, slow string
	busy                 int
	mu                   sync.Mutex
	slowed               int
}

func (g *tagsGate) serve(t *testing.T, m *testbed.MinIO) int {
	t.Helper()
	target, err := neturl.Parse(m.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target) // keeps the Host header the request was signed for
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, ok := strings.CutPrefix(r.URL.Path, "/"+g.bucket+"/")
		if _, tagging := r.URL.Query()["tagging"]; ok && tagging && r.Method == http.MethodGet {
			if strings.HasPrefix(key, g.denied) {
				s3Error(w, http.StatusForbidden, "AccessDenied", r.URL.Path)
				return
			}
			g.mu.Lock()
			slow := key == g.slow && g.slowed < g.busy
			if slow {
				g.slowed++
			}
			g.mu.Unlock()
			if slow {
				s3Error(w, http.StatusServiceUnavailable, "SlowDown", r.URL.Path)
				return
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	port, err := strconv.Atoi(srv.URL[strings.LastIndex(srv.URL, ":")+1:])
	if err != nil {
		t.Fatal(err)
	}
	return port
}

func s3Error(w http.ResponseWriter, status int, code, resource string) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>%s</Message><Resource>%s</Resource></Error>`, code, code, resource)
}

// TestBucketTagsTheBackupCouldNotRead: a backup whose store refuses to give some objects' tags
// (AccessDenied) records them as unread, and a restore leaves the target's tags of those objects
// as they are, whether it puts the object's bytes or not, and verify does not compare them; a
// store that is only busy (SlowDown) is asked again, and its tags move.
func TestBucketTagsTheBackupCouldNotRead(t *testing.T) {
	testbed.Require(t, tb)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const blueNS, greenNS, bucket, backup = "bucket-tags", "bucket-tags-green", "tg-artifacts", "bucket-tags"
	const same, changed, busy, typed = "locked/same.bin", "locked/changed.bin", "busy.txt", "meta.json"
	blueMinIO, greenMinIO := tb.MinIO["blue"], tb.MinIO["green"]
	gate := &tagsGate{bucket: bucket, denied: "locked/", slow: busy, busy: 12}
	_, blueKC := clients(t, "blue")
	pod := serveWorkload(t, blueKC, blueNS, "minio", "artifact-keys", map[string]string{"accesskey": blueMinIO.AccessKey, "secretkey": blueMinIO.SecretKey})
	blueCluster, _ := clients(t, "blue")
	if err := blueCluster.MapPortForward(ctx, blueNS, pod, 9000, "127.0.0.1", gate.serve(t, blueMinIO)); err != nil {
		t.Fatal(err)
	}
	serveMinIO(t, "green", greenNS)
	for _, m := range []*testbed.MinIO{blueMinIO, greenMinIO} {
		if err := m.CreateBucket(ctx, bucket); err != nil {
			t.Fatal(err)
		}
		for key := range bucketContentsIfAny(ctx, m, bucket) {
			m.S3Client().DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
		}
	}
	put := func(m *testbed.MinIO, key, body, tagging, contentType string) {
		t.Helper()
		in := &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader(body)}
		if tagging != "" {
			in.Tagging = aws.String(tagging)
		}
		if contentType != "" {
			in.ContentType = aws.String(contentType)
		}
		if _, err := m.S3Client().PutObject(ctx, in); err != nil {
			t.Fatalf("put %q: %v", key, err)
		}
	}
	put(blueMinIO, same, "same bytes", "stage=prod", "")
	put(blueMinIO, changed, "blue's bytes", "stage=prod", "")
	put(blueMinIO, busy, "busy", "stage=busy", "")
	put(blueMinIO, typed, `{"a": 1}`, "", "application/json")
	// green holds one object as blue does but for its tags, one with other bytes, both with tags
	// of its own.
	put(greenMinIO, same, "same bytes", "owner=green", "")
	put(greenMinIO, changed, "green's other bytes", "owner=green", "")

	config := bucketConfig(t, blueNS, bucket)
	url := backupMinIO(t, backup)
	code, out, errOut := runFerry(t, "--storage", url, "backup", "--from", "blue", "-f", config, "--name", backup)
	t.Logf("ferry backup exited %d\nstdout: %.3000s", code, out)
	if code != 3 || !strings.Contains(out, "AccessDenied") {
		t.Fatalf("ferry backup exited %d (want 3, and the refused tags listed)\nstdout: %.3000s\nstderr: %.3000s", code, out, errOut)
	}
	if strings.Contains(out, "SlowDown") {
		t.Errorf("the backup took a busy store's SlowDown for a refusal:\n%.3000s", out)
	}
	store, m := readManifest(t, url, backup)
	if len(m.Buckets) != 1 || len(m.Buckets[0].Objects) != 4 {
		t.Fatalf("the backup's buckets: %+v", m.Buckets)
	}
	greenCluster, greenKC := clients(t, "green")
	cfg, err := greenCluster.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	b := &checkedBackup{bucket: bucket, backup: backup, store: store, manifest: m,
		copies: buckets.Copies{Config: cfg, Client: greenKC, Parallel: 4, Mapping: snapshot.Mapping{Namespaces: map[string]string{blueNS: greenNS}}}}

	// The restore names the tags it could not bring back, as the backup does.
	report := b.run(t, ctx, b.copies.Restore)
	if items := report.Problems(); len(items) != 1 || items[0].Status != snapshot.StatusSkipped || items[0].Name != bucket+" object tags" ||
		!strings.Contains(items[0].Detail, "AccessDenied") {
		t.Errorf("the restore lists %+v, want the objects' tags the backup does not hold skipped", items)
	}
	for key, want := range map[string]map[string]string{same: {"owner": "green"}, changed: {"owner": "green"}, busy: {"stage": "busy"}, typed: {}} {
		if got := objectTags(t, greenMinIO, bucket, key); !maps.Equal(got, want) {
			t.Errorf("after the restore green's %s has tags %v, want %v", key, got, want)
		}
	}
	if got := bucketContents(t, greenMinIO, bucket, "locked/")[changed]; string(got) != "blue's bytes" {
		t.Errorf("green's %s holds %d bytes after the restore, blue's %d", changed, len(got), len("blue's bytes"))
	}
	verify := b.run(t, ctx, b.copies.Verify)
	if items := verify.Problems(); len(items) > 0 || verify.Counts["buckets"][snapshot.StatusIdentical] != 4 {
		t.Errorf("verify lists %+v, counts %v; want 4 identical", items, verify.Counts["buckets"])
	}
	// The busy object's tags were read: verify compares them.
	put(greenMinIO, busy, "busy", "stage=other", "")
	verify = b.run(t, ctx, b.copies.Verify)
	if items := verify.Problems(); len(items) != 1 || items[0].Name != bucket+"/"+busy || !strings.Contains(items[0].Detail, "tags differ: stage") {
		t.Errorf("verify lists %+v; want %s's tag stage named", items, busy)
	}
}

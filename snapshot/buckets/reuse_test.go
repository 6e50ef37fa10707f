package buckets

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/storage"
	"github.com/minio/minio-go/v7"
)

func TestRecordVersionOnlyOfTheObjectRead(t *testing.T) {
	listedAt := time.Date(2026, 12, 1, 10, 0, 0, 123e6, time.UTC) // a listing's time has milliseconds
	const md5OfBytes = "0123456789abcdef0123456789abcdef"
	for _, c := range []struct {
		name       string
		etag       string // listed, and read unless the case changes it
		read       minio.ObjectInfo
		contentMD5 string
		record     bool
	}{
		{"the object listed", md5OfBytes, minio.ObjectInfo{ETag: md5OfBytes, LastModified: listedAt.Truncate(time.Second)}, md5OfBytes, true},
		{"a multipart upload's", "fedcba9876543210fedcba9876543210-3", minio.ObjectInfo{ETag: "fedcba9876543210fedcba9876543210-3", LastModified: listedAt.Truncate(time.Second)}, md5OfBytes, true},
		{"rewritten after the listing", md5OfBytes, minio.ObjectInfo{ETag: "def", LastModified: listedAt.Add(time.Second).Truncate(time.Second)}, md5OfBytes, false},
		{"the same bytes written again after the listing", md5OfBytes, minio.ObjectInfo{ETag: md5OfBytes, LastModified: listedAt.Add(2 * time.Second).Truncate(time.Second)}, md5OfBytes, false},
		{"an ETag not of the content", "v7-1733047200", minio.ObjectInfo{ETag: "v7-1733047200", LastModified: listedAt.Truncate(time.Second)}, md5OfBytes, false},
		{"another MD5 than the bytes read", "ffffffffffffffffffffffffffffffff", minio.ObjectInfo{ETag: "ffffffffffffffffffffffffffffffff", LastModified: listedAt.Truncate(time.Second)}, md5OfBytes, false},
		{"no ETag", "", minio.ObjectInfo{LastModified: listedAt.Truncate(time.Second)}, md5OfBytes, false},
	} {
		var obj snapshot.BucketObject
		recordVersion(&obj, minio.ObjectInfo{Key: "k", Size: 3, ETag: c.etag, LastModified: listedAt}, c.read, c.contentMD5)
		if got := obj.ETag != ""; got != c.record || (got && !obj.Modified.Equal(listedAt)) {
			t.Errorf("%s: recorded %q at %v, want recorded %t at the listing's time", c.name, obj.ETag, obj.Modified, c.record)
		}
	}
}

func TestUnchangedAsTheEarlierCopyRecordedIt(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 123e6, time.UTC)
	e := &earlier{backup: "b1", objects: map[string]earlierObject{
		"k": {object: snapshot.BucketObject{Key: "k", Size: 3, ETag: "abc", Modified: at}},
	}}
	for _, c := range []struct {
		name string
		obj  minio.ObjectInfo
		want bool
	}{
		{"as recorded", minio.ObjectInfo{Key: "k", Size: 3, ETag: "abc", LastModified: at}, true},
		{"another size", minio.ObjectInfo{Key: "k", Size: 4, ETag: "abc", LastModified: at}, false},
		{"another ETag", minio.ObjectInfo{Key: "k", Size: 3, ETag: "abd", LastModified: at}, false},
		{"written again", minio.ObjectInfo{Key: "k", Size: 3, ETag: "abc", LastModified: at.Add(time.Millisecond)}, false},
		{"another key", minio.ObjectInfo{Key: "j", Size: 3, ETag: "abc", LastModified: at}, false},
	} {
		if _, got := e.unchanged(c.obj); got != c.want {
			t.Errorf("%s: unchanged = %t, want %t", c.name, got, c.want)
		}
	}
	if _, ok := (*earlier)(nil).unchanged(minio.ObjectInfo{Key: "k"}); ok {
		t.Error("no earlier copy: an object is unchanged")
	}
}

func TestSameStore(t *testing.T) {
	item := plans.DataItem{Name: "mlpipeline", Namespace: "kubeflow", Workload: "deployment/minio"}
	for _, c := range []struct {
		name    string
		buckets []plans.DataItem
		want    bool
	}{
		{"the same workload", []plans.DataItem{{Name: "mlpipeline", Namespace: "kubeflow", Workload: "deployment/minio", Pod: "minio-abc"}}, true},
		{"another namespace", []plans.DataItem{{Name: "mlpipeline", Namespace: "other", Workload: "deployment/minio"}}, false},
		{"an endpoint", []plans.DataItem{{Name: "mlpipeline", Endpoint: "https://s3.example"}}, false},
		{"no such bucket", []plans.DataItem{{Name: "other", Namespace: "kubeflow", Workload: "deployment/minio"}}, false},
	} {
		if got := sameStore(c.buckets, item); got != c.want {
			t.Errorf("%s: sameStore = %t, want %t", c.name, got, c.want)
		}
	}
}

// settingNone is a store's error code for a bucket without the setting of a query parameter.
var settingNone = map[string]string{"object-lock": "ObjectLockConfigurationNotFoundError", "policy": "NoSuchBucketPolicy",
	"lifecycle": "NoSuchLifecycleConfiguration", "tagging": "NoSuchTagSet", "encryption": "ServerSideEncryptionConfigurationNotFoundError"}

func firstQuery(r *http.Request) string {
	for k := range r.URL.Query() {
		if _, ok := settingNone[k]; ok {
			return k
		}
	}
	return ""
}

// TestCaptureLeavesOutAnObjectDeletedAfterTheListing: a live store lists an object and has
// deleted it by the time it is read (a compactor, a garbage collection); the backup holds the
// bucket as it was read, without that object, instead of failing. Its credentials may not read
// the objects' tags nor the bucket's policy: the backup goes on and lists both as skipped. The store is an S3 server of
// the test's own, on loopback.
func TestCaptureLeavesOutAnObjectDeletedAfterTheListing(t *testing.T) {
	modified := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Query().Has("location"):
			io.WriteString(w, `<LocationConstraint xmlns="http://s3.amazonaws.com/doc/2006-03-01/"></LocationConstraint>`)
		case r.URL.Query().Has("tagging") && r.URL.Path == "/mlpipeline/kept", r.URL.Query().Has("policy"):
			// Credentials that may read objects but not their tags nor the bucket's policy.
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusForbidden)
			io.WriteString(w, `<Error><Code>AccessDenied</Code><Message>Access Denied.</Message></Error>`)
		case r.URL.Query().Has("versioning"):
			io.WriteString(w, `<VersioningConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/"/>`)
		case settingNone[firstQuery(r)] != "": // a bucket without the setting
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `<Error><Code>`+settingNone[firstQuery(r)]+`</Code><Message>none</Message></Error>`)
		case r.URL.Path == "/mlpipeline/" && r.URL.Query().Get("list-type") == "2":
			w.Header().Set("Content-Type", "application/xml")
			io.WriteString(w, `<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>mlpipeline</Name><KeyCount>2</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>`+
				`<Contents><Key>gone</Key><LastModified>2026-12-01T10:00:00.000Z</LastModified><ETag>"e1"</ETag><Size>4</Size></Contents>`+
				`<Contents><Key>kept</Key><LastModified>2026-12-01T10:00:00.000Z</LastModified><ETag>"4d8b6084f3d167b76cac66a22a91be02"</ETag><Size>4</Size></Contents></ListBucketResult>`)
		case r.URL.Path == "/mlpipeline/" || r.URL.Path == "/mlpipeline":
			w.WriteHeader(http.StatusOK) // the bucket exists
		case r.URL.Path == "/mlpipeline/kept":
			w.Header().Set("ETag", `"4d8b6084f3d167b76cac66a22a91be02"`)
			w.Header().Set("Last-Modified", modified.Format(http.TimeFormat))
			w.Header().Set("X-Amz-Tagging-Count", "1")
			w.Header().Set("Content-Length", "4")
			if r.Method != http.MethodHead {
				io.WriteString(w, "kept")
			}
		default:
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusNotFound)
			if r.Method != http.MethodHead {
				io.WriteString(w, `<Error><Code>NoSuchKey</Code><Message>The specified key does not exist.</Message><Key>gone</Key></Error>`)
			}
		}
	}))
	defer srv.Close()
	ctx := context.Background()
	store, err := storage.NewFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	plan := &plans.Plan{Buckets: []plans.DataItem{{Name: "mlpipeline", Endpoint: srv.URL, Found: true}}}
	w, err := snapshot.Create(ctx, store, "b1", plans.Cluster{}, plan, time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := (Copies{Plan: plan, Storage: store}).Capture(ctx, w); err != nil {
		t.Fatalf("capture: %v", err)
	}
	m, err := w.Commit(ctx, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Buckets) != 1 || len(m.Buckets[0].Objects) != 1 || m.Buckets[0].Objects[0].Key != "kept" || m.Buckets[0].Objects[0].ETag != "4d8b6084f3d167b76cac66a22a91be02" {
		t.Fatalf("bucket %+v, want the object kept alone, its ETag recorded", m.Buckets)
	}
	// What the store refused to let the backup read is listed as skipped, not failed.
	skipped := map[string]bool{}
	for _, sk := range m.Skipped {
		skipped[sk.Name] = true
	}
	if !skipped["mlpipeline object tags"] || !skipped["mlpipeline policy"] || len(m.Skipped) != 2 {
		t.Errorf("skipped %+v, want the objects' tags and the policy of mlpipeline", m.Skipped)
	}
}

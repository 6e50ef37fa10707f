package buckets

import (
	"testing"
	"time"

	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/minio/minio-go/v7"
)

func TestRecordVersionOnlyOfTheObjectRead(t *testing.T) {
	listedAt := time.Date(2026, 12, 1, 10, 0, 0, 123e6, time.UTC) // a listing's time has milliseconds
	listed := minio.ObjectInfo{Key: "k", Size: 3, ETag: "abc", LastModified: listedAt}
	for _, c := range []struct {
		name   string
		read   minio.ObjectInfo
		record bool
	}{
		{"the object listed", minio.ObjectInfo{ETag: "abc", LastModified: listedAt.Truncate(time.Second)}, true},
		{"rewritten after the listing", minio.ObjectInfo{ETag: "def", LastModified: listedAt.Add(time.Second).Truncate(time.Second)}, false},
		{"the same bytes written again after the listing", minio.ObjectInfo{ETag: "abc", LastModified: listedAt.Add(2 * time.Second).Truncate(time.Second)}, false},
		{"no ETag", minio.ObjectInfo{LastModified: listedAt.Truncate(time.Second)}, false},
	} {
		var obj snapshot.BucketObject
		l := listed
		if c.name == "no ETag" {
			l.ETag = ""
		}
		recordVersion(&obj, l, c.read)
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

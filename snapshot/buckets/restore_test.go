package buckets

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/plans/config"
	"github.com/ferrykube/ferry/snapshot"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynfake "k8s.io/client-go/dynamic/fake"
)

func objectOf(key, data string) snapshot.BucketObject {
	sum := sha256.Sum256([]byte(data))
	return snapshot.BucketObject{Key: key, Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])}
}

func TestDecideLeavesOrPrunesTheTargetsOwnObjects(t *testing.T) {
	want := []snapshot.BucketObject{objectOf("a/new", "new"), objectOf("a/same-size", "abc"), objectOf("a/resized", "abcd")}
	have := map[string]int64{"a/same-size": 3, "a/resized": 9, "extra/one": 1, "extra/two": 2}

	kept := decide(want, have, false)
	if len(kept.remove) != 0 {
		t.Errorf("without Exact, objects to delete: %v", kept.remove)
	}
	wantPuts := []put{
		{BucketObject: want[0]},
		{BucketObject: want[1], present: true, sameSize: true},
		{BucketObject: want[2], present: true},
	}
	if !slices.Equal(kept.put, wantPuts) {
		t.Errorf("puts %+v\nwant %+v", kept.put, wantPuts)
	}

	pruned := decide(want, have, true)
	slices.Sort(pruned.remove)
	if !slices.Equal(pruned.remove, []string{"extra/one", "extra/two"}) || !slices.Equal(pruned.put, wantPuts) {
		t.Errorf("with Exact: remove %v, puts %+v", pruned.remove, pruned.put)
	}
}

func TestVerifyingHoldsBackTheEndOfAWrongCopy(t *testing.T) {
	const data = "artifact bytes: 0123456789abcdefghijklmnopqrstuvwxyz"
	for _, tc := range []struct {
		name, stored, want string
	}{
		{"intact", data, ""},
		{"truncated", data[:len(data)-3], "holds"},
		{"longer", data + "!", "longer than"},
		{"changed", strings.Replace(data, "0", "O", 1), "SHA-256"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newVerifying(&slowReader{s: tc.stored}, objectOf("k", data))
			var got bytes.Buffer
			_, err := io.Copy(&got, v)
			if tc.want == "" {
				if err != nil || got.String() != data {
					t.Fatalf("err %v, passed on %q", err, got.String())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, snapshot.ErrCorrupt) || v.failure() == nil {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
			// The uploader never receives the whole object.
			if got.Len() >= len(data) {
				t.Fatalf("passed on %d of %d bytes: a wrong copy could be stored whole", got.Len(), len(data))
			}
		})
	}
	t.Run("empty", func(t *testing.T) {
		v := newVerifying(strings.NewReader(""), objectOf("k", ""))
		if n, err := v.Read(make([]byte, 8)); n != 0 || err != io.EOF {
			t.Fatalf("read %d, %v", n, err)
		}
	})
}

type slowReader struct{ s string }

func (r *slowReader) Read(p []byte) (int, error) {
	if r.s == "" {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), 5)], r.s)
	r.s = r.s[n:]
	return n, nil
}

func TestCompareObject(t *testing.T) {
	o := objectOf("k", "data")
	for _, tc := range []struct {
		size         int64
		sum          string
		status, text string
	}{
		{4, o.SHA256, snapshot.StatusIdentical, ""},
		{5, o.SHA256, snapshot.StatusDifferent, "size: backup 4, target 5"},
		{4, strings.Repeat("0", 64), snapshot.StatusDifferent, "SHA-256: backup " + o.SHA256 + ", target " + strings.Repeat("0", 64)},
	} {
		if status, detail := compareObject(o, tc.size, tc.sum); status != tc.status || detail != tc.text {
			t.Errorf("size %d: %s %q, want %s %q", tc.size, status, detail, tc.status, tc.text)
		}
	}
}

func TestStoredNameFollowsTheCapture(t *testing.T) {
	b := snapshot.Bucket{Name: "mlpipeline", Prefix: "buckets/mlpipeline/"}
	plain := &snapshot.Reader{Manifest: &snapshot.Manifest{}}
	if got, err := storedName(plain, b, snapshot.BucketObject{Key: "odd key/x.txt"}); err != nil || got != "buckets/mlpipeline/odd%20key/x.txt" {
		t.Errorf("plain: %q (%v)", got, err)
	}
	enc := &snapshot.Reader{Manifest: &snapshot.Manifest{Encryption: &snapshot.Encryption{Format: "age"}}}
	if got, err := storedName(enc, b, snapshot.BucketObject{Key: "a/b"}); err != nil || got != "buckets/mlpipeline/a/b"+snapshot.EncryptedSuffix {
		t.Errorf("encrypted: %q (%v)", got, err)
	}
	// A key stored under its hash is read from the name the manifest records, not its escaped key.
	long := strings.Repeat("ä", 400)
	stored, hashed := StoredName(long)
	if got, err := storedName(plain, b, snapshot.BucketObject{Key: long, Stored: stored}); err != nil || !hashed || got != "buckets/mlpipeline/"+stored {
		t.Errorf("hashed: %q (hashed %v, %v), want buckets/mlpipeline/%s", got, hashed, err, stored)
	}
	for _, bad := range []string{"../../objects/x", "%hashed/../x", hashedPrefix + strings.Repeat("A", 64), hashedPrefix + "00"} {
		if got, err := storedName(plain, b, snapshot.BucketObject{Key: "k", Stored: bad}); !errors.Is(err, snapshot.ErrCorrupt) {
			t.Errorf("stored name %q read as %q (%v), want it refused as corrupt", bad, got, err)
		}
	}
}

func TestRestoreReportsABucketItCannotPlace(t *testing.T) {
	r := &snapshot.Reader{Manifest: &snapshot.Manifest{Plan: &plans.Plan{},
		Buckets: []snapshot.Bucket{{Name: "mlpipeline", Objects: []snapshot.BucketObject{objectOf("a", "a")}}}}}
	var report snapshot.Report
	if err := (Copies{}).Restore(context.Background(), r, &report); err != nil {
		t.Fatal(err)
	}
	items := report.Problems(snapshot.StatusFailed)
	if len(items) != 1 || items[0].Name != "mlpipeline" || !strings.Contains(items[0].Detail, "1 objects were not restored") {
		t.Fatalf("report %+v", report.Items)
	}
}

func TestRestoreAndVerifyReportAStoreTheyCannotReach(t *testing.T) {
	dyn := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		{Version: "v1", Resource: "pods"}: "PodList", {Group: "apps", Version: "v1", Resource: "deployments"}: "DeploymentList",
	})
	cfg := config.Bucket{Name: "mlpipeline", Namespace: "kubeflow", Workload: "deployment/minio", Port: 9000}
	r := &snapshot.Reader{Manifest: &snapshot.Manifest{
		Plan:    &plans.Plan{Config: config.Planning{Buckets: []config.Bucket{cfg}}},
		Buckets: []snapshot.Bucket{{Name: "mlpipeline", Objects: []snapshot.BucketObject{objectOf("a", "a"), objectOf("b", "b")}}},
	}}
	c := Copies{dyn: dyn, Mapping: snapshot.Mapping{Namespaces: map[string]string{"kubeflow": "kf"}}}
	var restored, verified snapshot.Report
	if err := c.Restore(context.Background(), r, &restored); err != nil {
		t.Fatal(err)
	}
	if err := c.Verify(context.Background(), r, &verified); err != nil {
		t.Fatal(err)
	}
	for report, want := range map[*snapshot.Report]string{
		&restored: "no deployment/minio in namespace kf on the target; its 2 objects were not restored",
		&verified: "cannot verify its 2 objects: no deployment/minio in namespace kf on the target",
	} {
		if len(report.Items) != 1 || report.Items[0].Name != "mlpipeline" || report.Items[0].Status != snapshot.StatusFailed || report.Items[0].Detail != want {
			t.Errorf("report %+v, want mlpipeline failed: %s", report.Items, want)
		}
	}
}

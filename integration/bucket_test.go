package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"strings"
	"testing"

	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/snapshot/buckets"
)

// TestBackupCopiesBucket runs the platform's MinIO pod on blue (its port 9000 forwarded to blue's
// MinIO server) and checks that ferry backup copies the mlpipeline bucket object by object.
func TestBackupCopiesBucket(t *testing.T) {
	want := blueMinIO(t)
	ctx := context.Background()

	url := backupMinIO(t, "buckettest")
	code, out, errOut := runFerry(t, "--storage", url, "backup", "--from", "blue", "--preset", "kubeflow", "--name", "with-bucket")
	if strings.Contains(out, "bucket mlpipeline") {
		t.Fatalf("ferry backup exited %d, skipping the bucket\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	store, m := wantBackupExit(t, url, "with-bucket", code, out, errOut)
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

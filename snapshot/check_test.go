package snapshot

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// Check names each damaged file by the item it holds, finds every one of them, and reads an
// intact backup as intact.
func TestCheckNamesEveryDamagedFile(t *testing.T) {
	ctx := context.Background()
	store := newStore(t)
	writeLikeKindsBackup(t, store, "b", nil)
	open := func() *Reader {
		t.Helper()
		r, err := Open(ctx, store, "b", nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Manifest.Volumes = []Volume{{Namespace: "ns", Name: "data", Key: "volumes/ns/data.tar.zst"}}
		r.Manifest.Databases = []Database{{Name: "kfp", Key: "databases/kfp.sql.zst"}}
		r.Manifest.Buckets = []Bucket{{Name: "mlpipeline", Prefix: "buckets/mlpipeline/"}}
		return r
	}
	if damaged, err := open().Check(ctx, 2); err != nil || len(damaged) != 0 {
		t.Fatalf("an intact backup: %+v, %v; want nothing damaged", damaged, err)
	}

	for file, data := range map[string]string{
		"volumes/ns/data.tar.zst": "data of volumes/ns/data.tar.zsT", // a flipped byte
		"databases/kfp.sql.zst":   "data of",                         // cut short
		"buckets/mlpipeline/a":    "",                                // emptied
		"b.tar.gz":                "data of b.tar.gz, and more",      // grown
	} {
		if err := store.Put(ctx, Prefix("b")+file, strings.NewReader(data)); err != nil {
			t.Fatal(err)
		}
	}
	damaged, err := open().Check(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range damaged {
		got = append(got, d.What())
		if !errors.Is(d.Err, ErrCorrupt) || !strings.Contains(d.Err.Error(), "b/") {
			t.Errorf("%s: %v; want an error naming the file and matching ErrCorrupt", d.What(), d.Err)
		}
	}
	want := []string{"bucket mlpipeline", "database kfp", "objects b.tar.gz", "volume ns/data"}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Errorf("damaged %q, want %q", got, want)
	}
}

package integration

import (
	"context"
	"errors"
	"io"
	"path"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/storage"
	"github.com/sirupsen/logrus"
	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	"github.com/vmware-tanzu/velero/pkg/archive"
	"github.com/vmware-tanzu/velero/pkg/persistence"
	"github.com/vmware-tanzu/velero/pkg/plugin/velero"
	"github.com/vmware-tanzu/velero/pkg/util/filesystem"
)

// veleroStore is Velero's object store plugin interface over a ferry storage backend, so that
// Velero's own persistence code reads what ferry wrote, as a Velero server pointed at the same
// bucket would.
type veleroStore struct{ backend storage.Backend }

func (s veleroStore) GetObjectStore(string) (velero.ObjectStore, error) { return s, nil }
func (s veleroStore) Init(map[string]string) error                      { return nil }
func (s veleroStore) PutObject(_, key string, body io.Reader) error {
	return s.backend.Put(context.Background(), key, body)
}
func (s veleroStore) ObjectExists(_, key string) (bool, error) {
	_, err := s.backend.Stat(context.Background(), key)
	if errors.Is(err, storage.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}
func (s veleroStore) GetObject(_, key string) (io.ReadCloser, error) {
	return s.backend.Get(context.Background(), key)
}
func (s veleroStore) ListCommonPrefixes(_, prefix, delimiter string) ([]string, error) {
	seen := map[string]bool{}
	err := s.backend.List(context.Background(), prefix, func(o storage.ObjectInfo) error {
		if rest := strings.TrimPrefix(o.Key, prefix); strings.Contains(rest, delimiter) {
			seen[prefix+rest[:strings.Index(rest, delimiter)+len(delimiter)]] = true
		}
		return nil
	})
	var out []string
	for p := range seen {
		out = append(out, p)
	}
	sort.Strings(out)
	return out, err
}
func (s veleroStore) ListObjects(_, prefix string) ([]string, error) {
	var out []string
	err := s.backend.List(context.Background(), prefix, func(o storage.ObjectInfo) error { out = append(out, o.Key); return nil })
	return out, err
}
func (s veleroStore) DeleteObject(_, key string) error {
	return s.backend.Delete(context.Background(), key)
}
func (s veleroStore) CreateSignedURL(string, string, time.Duration) (string, error) {
	return "", errors.New("not supported")
}

// TestVeleroReadsFerryBackup opens a backup of blue with Velero's persistence and archive packages
// (velero-format.md §7) and finds every object of ferry's manifest.
func TestVeleroReadsFerryBackup(t *testing.T) {
	applyPlatform(t)
	dir := t.TempDir()
	if code, out, errOut := runFerry(t, "--storage", "file://"+dir, "backup", "--from", "blue", "--preset", "kubeflow", "--name", "for-velero"); code != 0 && code != 3 {
		t.Fatalf("ferry backup exited %d\n%s\n%s", code, out, errOut)
	}
	store, m := readManifest(t, "file://"+dir, "for-velero")

	log := logrus.New()
	bsl := &velerov1.BackupStorageLocation{Spec: velerov1.BackupStorageLocationSpec{
		Provider:    "ferry-test",
		StorageType: velerov1.StorageType{ObjectStorage: &velerov1.ObjectStorageLocation{Bucket: "backups"}},
	}}
	bs, err := persistence.NewObjectBackupStoreGetter(nil).Get(bsl, veleroStore{store}, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := bs.IsValid(); err != nil {
		t.Fatalf("Velero finds the storage invalid: %v", err)
	}
	names, err := bs.ListBackups()
	if err != nil || len(names) != 1 || names[0] != "for-velero" {
		t.Fatalf("Velero lists %v (%v)", names, err)
	}
	if ok, err := bs.BackupExists("backups", "for-velero"); !ok || err != nil {
		t.Fatalf("Velero: backup exists = %v (%v)", ok, err)
	}
	meta, err := bs.GetBackupMetadata("for-velero")
	if err != nil || meta.Name != "for-velero" || meta.Status.Phase != velerov1.BackupPhaseCompleted || meta.Status.FormatVersion != "1.1.0" {
		t.Fatalf("Velero reads the metadata as %+v (%v)", meta, err)
	}
	contents, err := bs.GetBackupContents("for-velero")
	if err != nil {
		t.Fatal(err)
	}
	defer contents.Close()
	fs := filesystem.NewFileSystem()
	extracted, err := archive.NewExtractor(log, fs).UnzipAndExtractBackup(contents)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.RemoveAll(extracted)
	resources, err := archive.NewParser(log, fs).Parse(extracted)
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for gr, items := range resources {
		for ns, names := range items.ItemsByNamespace {
			for _, name := range names {
				found[path.Join(gr, ns, name)] = true
			}
		}
	}
	for _, o := range m.Objects {
		gr := strings.TrimSuffix(o.Resource+"."+o.Group, ".")
		if !found[path.Join(gr, o.Namespace, o.Name)] {
			t.Errorf("Velero does not find %s %s/%s", gr, o.Namespace, o.Name)
		}
	}
	if len(found) != len(m.Objects) {
		t.Errorf("Velero finds %d objects, the manifest lists %d", len(found), len(m.Objects))
	}
	t.Logf("Velero found all %d objects", len(found))
}

package snapshot

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"strings"
	"time"

	"filippo.io/age"
	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/storage"
	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
)

// Reader reads one backup for restore and verify. Every file it opens is checked against the
// manifest's record of it (size and SHA-256 of the stored bytes) and decrypted when the backup is
// encrypted, so a truncated, tampered or foreign stream is an error, never silently restored.
type Reader struct {
	store      storage.Backend
	name       string
	identities []age.Identity
	streams    map[string]Stream
	// Manifest is the backup's manifest. For a backup Velero wrote it is made from
	// velero-backup.json and lists no objects, volumes, databases or buckets.
	Manifest *Manifest
	// Velero is set for a backup Velero wrote (no ferry manifest): its streams cannot be checked.
	Velero bool
	// VeleroVolumes is the volume data of a backup Velero wrote, which ferry does not read (pod
	// volume backups and snapshots): restore and verify report each as skipped.
	VeleroVolumes []Skipped
}

// ErrCorrupt matches the errors of streams that do not match the manifest.
var ErrCorrupt = errors.New("the backup's file does not match its manifest")

// Open opens a complete backup, or one Velero wrote, as Classify decides its state. A backup
// that is incomplete or still being written is bad input; a manifest that cannot be read or fails
// its checks is an error, never a reason to read the backup's Velero files instead. Identities
// decrypt an encrypted backup.
func Open(ctx context.Context, store storage.Backend, name string, identities []age.Identity) (*Reader, error) {
	st, err := Inspect(ctx, store, name, time.Now())
	if err != nil {
		return nil, err
	}
	r := &Reader{store: store, name: name, identities: identities, streams: map[string]Stream{}}
	switch st.State {
	case Velero:
		vm, err := readVeleroBackup(ctx, store, name)
		if err != nil {
			return nil, err
		}
		if r.VeleroVolumes, err = readVeleroVolumes(ctx, store, name); err != nil {
			return nil, err
		}
		r.Manifest, r.Velero = vm, true
		return r, nil
	case Running:
		return nil, badinput.Errorf("backup %s is still being written (its heartbeat was stored at %s): wait for it to finish", name, st.LastBeat.UTC().Format(time.RFC3339))
	case Incomplete:
		return nil, badinput.Errorf("backup %s is incomplete: it has no %s, which is written last, so nothing of it is read (ferry backups describe %s)", name, ManifestFile, name)
	}
	m, err := ReadManifest(ctx, store, name)
	if err != nil {
		return nil, err
	}
	if m.Encryption != nil && len(identities) == 0 {
		return nil, badinput.Errorf("backup %s is encrypted with age to %s: %w", name, strings.Join(m.Encryption.Recipients, ", "), ErrNoIdentity)
	}
	for _, s := range m.Streams {
		r.streams[s.Key] = s
	}
	r.Manifest = m
	return r, nil
}

// readVeleroBackup makes a manifest of a backup Velero wrote, from its velero-backup.json.
func readVeleroBackup(ctx context.Context, store storage.Reader, name string) (*Manifest, error) {
	rc, err := store.Get(ctx, Prefix(name)+VeleroFile)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	var b velerov1.Backup
	if err := json.NewDecoder(rc).Decode(&b); err != nil {
		return nil, badinput.Errorf("backup %s: %s: %v", name, VeleroFile, err)
	}
	m := &Manifest{Name: name, VeleroCompatible: true}
	if b.Status.StartTimestamp != nil {
		m.StartedAt = b.Status.StartTimestamp.Time
	}
	if b.Status.CompletionTimestamp != nil {
		m.CompletedAt = b.Status.CompletionTimestamp.Time
	}
	return m, nil
}

// readVeleroVolumes lists the volume data of a backup Velero wrote, which ferry does not read:
// its pod volume backups (file data in Velero's Kopia or Restic repository), its native volume
// snapshots and its CSI snapshots. Each file is optional, as for Velero; one that is there but
// cannot be read is an error, as it fails Velero's own restore.
func readVeleroVolumes(ctx context.Context, store storage.Reader, name string) ([]Skipped, error) {
	var out []Skipped
	var pvbs []velerov1.PodVolumeBackup
	if err := readVeleroList(ctx, store, name, name+"-podvolumebackups.json.gz", &pvbs); err != nil {
		return nil, err
	}
	for _, p := range pvbs {
		out = append(out, Skipped{Kind: "volume", Name: p.Spec.Pod.Namespace + "/" + p.Spec.Pod.Name + " volume " + p.Spec.Volume, Namespace: p.Spec.Pod.Namespace,
			Reason: "a pod volume backup of Velero's (its data is in Velero's repository, which ferry does not read)"})
	}
	var snaps []struct {
		Spec struct {
			PersistentVolumeName string `json:"persistentVolumeName"`
		} `json:"spec"`
	}
	if err := readVeleroList(ctx, store, name, name+"-volumesnapshots.json.gz", &snaps); err != nil {
		return nil, err
	}
	for _, sn := range snaps {
		out = append(out, Skipped{Kind: "volume", Name: "persistentvolume " + sn.Spec.PersistentVolumeName,
			Reason: "a volume snapshot Velero took (the storage provider's snapshot, which ferry does not restore)"})
	}
	var csi []struct {
		Metadata struct {
			Namespace string `json:"namespace"`
			Name      string `json:"name"`
		} `json:"metadata"`
	}
	if err := readVeleroList(ctx, store, name, name+"-csi-volumesnapshots.json.gz", &csi); err != nil {
		return nil, err
	}
	for _, sn := range csi {
		out = append(out, Skipped{Kind: "volume", Name: "volumesnapshot " + sn.Metadata.Namespace + "/" + sn.Metadata.Name, Namespace: sn.Metadata.Namespace,
			Reason: "a CSI snapshot Velero took, which ferry does not restore"})
	}
	return out, nil
}

// readVeleroList decodes one of Velero's optional gzip-JSON files of a backup into v.
func readVeleroList(ctx context.Context, store storage.Reader, name, file string, v any) error {
	rc, err := store.Get(ctx, Prefix(name)+file)
	if errors.Is(err, storage.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("backup %s: %w", name, err)
	}
	defer rc.Close()
	zr, err := gzip.NewReader(rc)
	if err != nil {
		return fmt.Errorf("backup %s: %s: %w", name, file, err)
	}
	if err := json.NewDecoder(zr).Decode(v); err != nil {
		return fmt.Errorf("backup %s: %s: %w", name, file, err)
	}
	return nil
}

// IdentityFileName names an identity file in errors (a command line names its flag instead).
const IdentityFileName = "identity file"

// ErrNoIdentity and ErrWrongIdentity match the errors of reading an encrypted backup without its key.
var (
	ErrNoIdentity    = errors.New("it needs its key, an age identity, to be read")
	ErrWrongIdentity = errors.New("the identity given is not one the backup was encrypted to")
)

// ParseIdentities reads age identities (AGE-SECRET-KEY-1...) from key files.
func ParseIdentities(files []string) ([]age.Identity, error) {
	var out []age.Identity
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return nil, badinput.Value(IdentityFileName, f, "%v", err)
		}
		ids, err := age.ParseIdentities(bufio.NewReader(fh))
		fh.Close()
		if err != nil {
			return nil, badinput.Value(IdentityFileName, f, "%v", err)
		}
		out = append(out, ids...)
	}
	return out, nil
}

// Name is the backup's name.
func (r *Reader) Name() string { return r.name }

// StorageKey is the full key of a file of the backup in its storage.
func (r *Reader) StorageKey(file string) string { return Prefix(r.name) + file }

// Stream is the manifest's record of a stored file (its key as Writer.Put returned it).
func (r *Reader) Stream(file string) (Stream, bool) {
	s, ok := r.streams[file]
	return s, ok
}

// Open reads a file of the backup by its stored name (as the manifest records it: with the
// encrypted suffix when encrypted), decrypted. The stored bytes are checked against the manifest as
// they are read: a read that reaches the end of a stream of another size or SHA-256 returns an error
// matching ErrCorrupt instead of io.EOF. Close reports a stream that was not read to its end.
func (r *Reader) Open(ctx context.Context, file string) (io.ReadCloser, error) {
	var want *Stream
	if !r.Velero {
		s, ok := r.streams[file]
		if !ok {
			return nil, fmt.Errorf("backup %s: %s: %w (not recorded)", r.name, file, ErrCorrupt)
		}
		want = &s
	}
	rc, err := r.store.Get(ctx, r.StorageKey(file))
	if err != nil {
		return nil, fmt.Errorf("backup %s: %w", r.name, err)
	}
	checked := &checkedReader{rc: rc, file: r.name + "/" + file, want: want, h: sha256.New()}
	if !strings.HasSuffix(file, EncryptedSuffix) {
		return checked, nil
	}
	if len(r.identities) == 0 {
		rc.Close()
		return nil, badinput.Errorf("backup %s: %s is encrypted: %w", r.name, file, ErrNoIdentity)
	}
	plain, err := age.Decrypt(checked, r.identities...)
	if err != nil {
		rc.Close()
		var noMatch *age.NoIdentityMatchError
		if errors.As(err, &noMatch) {
			return nil, badinput.Errorf("backup %s: %s: %w", r.name, file, ErrWrongIdentity)
		}
		return nil, fmt.Errorf("backup %s: %s: %w", r.name, file, err)
	}
	return &decrypted{plain: plain, checked: checked}, nil
}

// checkedReader counts and hashes the stored bytes and compares them with the manifest at EOF.
type checkedReader struct {
	rc   io.ReadCloser
	file string
	want *Stream
	h    hash.Hash
	n    int64
	done bool
}

func (c *checkedReader) Read(p []byte) (int, error) {
	n, err := c.rc.Read(p)
	c.h.Write(p[:n])
	c.n += int64(n)
	if errors.Is(err, io.EOF) {
		c.done = true
		if c.want != nil {
			if c.n != c.want.Bytes {
				return n, fmt.Errorf("%s: %d bytes stored, the manifest says %d (truncated or replaced): %w", c.file, c.n, c.want.Bytes, ErrCorrupt)
			}
			if sum := hex.EncodeToString(c.h.Sum(nil)); sum != c.want.SHA256 {
				return n, fmt.Errorf("%s: SHA-256 %s, the manifest says %s (tampered with): %w", c.file, sum, c.want.SHA256, ErrCorrupt)
			}
		}
	}
	return n, err
}

// Drain reads what is left of a stream of the backup and closes it: after a failed read, it tells
// whether the stored file itself is corrupt (the error then matches ErrCorrupt).
func Drain(rc io.ReadCloser) error {
	_, err := io.Copy(io.Discard, rc)
	if cerr := rc.Close(); err == nil || errors.Is(cerr, ErrCorrupt) {
		err = cerr
	}
	return err
}

// drainLimit is how much of a stream's tail Close reads to check it; formats that end with their
// own end marker (tar, zstd, gzip, age) leave at most a little unread.
const drainLimit = 1 << 20

func (c *checkedReader) Close() error {
	var err error
	if !c.done {
		_, err = io.Copy(io.Discard, io.LimitReader(c, drainLimit))
		if err == nil && !c.done {
			err = fmt.Errorf("%s: closed before its end was read", c.file)
		}
	}
	if cerr := c.rc.Close(); err == nil {
		err = cerr
	}
	return err
}

type decrypted struct {
	plain   io.Reader
	checked *checkedReader
}

// Read fails with ErrCorrupt on ciphertext that does not authenticate: age checks every chunk.
func (d *decrypted) Read(p []byte) (int, error) {
	n, err := d.plain.Read(p)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, ErrCorrupt) {
		err = fmt.Errorf("%s: %w: %v", d.checked.file, ErrCorrupt, err)
	}
	return n, err
}

func (d *decrypted) Close() error {
	// age authenticates each chunk and the end: reading plain text to its end reads the stored
	// stream to its end.
	_, err := io.Copy(io.Discard, io.LimitReader(d, drainLimit))
	if cerr := d.checked.Close(); err == nil || errors.Is(cerr, ErrCorrupt) {
		err = cerr
	}
	return err
}

// Store is the storage the backup is read from (a chunked volume's repository is there too).
func (r *Reader) Store() storage.Backend { return r.store }

// Identities are the age identities the backup is read with.
func (r *Reader) Identities() []age.Identity { return r.identities }

// Package snapshot is what a backup is: its layout in storage, its manifest, and the writer that
// makes one, complete only when its manifest is written last. The sub-packages capture each kind
// of data (resources, and in turn volumes, databases, buckets).
package snapshot

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"filippo.io/age"
	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/internal/buildinfo"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/storage"
)

// Files of a backup under backups/<name>/.
const (
	ManifestFile = "ferry-manifest.json"
	ClaimFile    = "ferry-claim.json"
	VeleroFile   = "velero-backup.json"
)

// Prefix is where a backup's files live in storage.
func Prefix(name string) string { return "backups/" + name + "/" }

var validName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$`)

// CheckName rejects names that cannot name a backup (they also name Velero's Backup object).
func CheckName(name string) error {
	if !validName.MatchString(name) {
		return badinput.Errorf("backup name %q: use lower-case letters, digits, '-' and '.', at most 63, starting and ending with a letter or digit", name)
	}
	return nil
}

// Manifest is the truth about a backup. It is written last: a backup without it is incomplete.
type Manifest struct {
	FormatVersion string         `json:"formatVersion"`
	Name          string         `json:"name"`
	Schedule      string         `json:"schedule,omitempty"` // the schedule that made it; before startedAt, as readHead needs
	Tool          buildinfo.Info `json:"tool"`
	Source        plans.Cluster  `json:"source"` // before startedAt, as readHead needs
	StartedAt     time.Time      `json:"startedAt"`
	CompletedAt   time.Time      `json:"completedAt"`
	Plan          *plans.Plan    `json:"plan"`
	Objects       []Object       `json:"objects"`
	Databases     []Database     `json:"databases,omitempty"`
	Buckets       []Bucket       `json:"buckets,omitempty"`
	Volumes       []Volume       `json:"volumes,omitempty"`
	// Skipped lists what the plan named but this backup does not hold, and why.
	Skipped []Skipped `json:"skipped,omitempty"`
	// NoData lists what the plan named that holds no data, so that there was nothing to copy (a
	// claim that has no volume yet), and why: not a loss. A restore makes such a claim again as
	// its object is, without a volume.
	NoData  []Skipped `json:"noData,omitempty"`
	Streams []Stream  `json:"streams"`
	Totals  Totals    `json:"totals"`
	// VeleroCompatible says whether velero-backup.json and the Velero archive were written.
	VeleroCompatible bool `json:"veleroCompatible"`
	// Encryption is set when every file but this manifest is encrypted with age.
	Encryption *Encryption `json:"encryption,omitempty"`
	// DigestKey names the stream holding the key of the objects' keyed digests (format 2), when
	// any object has one.
	DigestKey string `json:"digestKey,omitempty"`
}

// Encryption says how a backup's files are encrypted.
type Encryption struct {
	Format     string   `json:"format"` // "age"
	Recipients []string `json:"recipients"`
	// Suffix ends the name of every encrypted file.
	Suffix string `json:"suffix"`
}

// EncryptedSuffix ends the names of files encrypted with age.
const EncryptedSuffix = ".age"

// Object is one backed-up Kubernetes object and the digest of its normalized form.
type Object struct {
	Group     string `json:"group,omitempty"`
	Version   string `json:"version"`
	Kind      string `json:"kind"`
	Resource  string `json:"resource"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	// SHA256 is the object's digest, of the scheme Digest names.
	SHA256 string `json:"sha256"`
	// Digest is the digest's scheme: DigestFile, or DigestFileHMAC for Secrets; in older
	// backups DigestSHA256 (empty) or DigestHMAC (Secrets, format 2), of the normalized form.
	Digest string `json:"digest,omitempty"`
}

// GroupResource names the object's type as "resource.group" ("configmaps", "deployments.apps").
func (o Object) GroupResource() string {
	if o.Group == "" {
		return o.Resource
	}
	return o.Resource + "." + o.Group
}

// Database is a database's logical dump and what verifies its restore.
type Database struct {
	Name    string   `json:"name"`
	Engine  string   `json:"engine"`
	Key     string   `json:"key"`    // the compressed dump's file in the backup
	SHA256  string   `json:"sha256"` // of the SQL, before compression
	Bytes   int64    `json:"bytes"`
	Schemas []string `json:"schemas"`
	Tables  []Table  `json:"tables"`
	// RowDigests is the file of the digests of every row's key and column values, table by table
	// (see package databases), for verify after a schema upgrade: a stream like the dump, so
	// encrypted when the backup is. Backups made before it have none.
	RowDigests string `json:"rowDigests,omitempty"`
	// LargeObjects are the large objects of each dumped PostgreSQL database, which live in no
	// table of its own (pg_largeobject): files an application keeps by their oid. Backups made
	// before them have none, and their large objects are not compared.
	LargeObjects []LargeObjects `json:"largeObjects,omitempty"`
	// Sequences are the PostgreSQL database's sequences that have given out values, and the
	// next each gives: a target's must not be behind (its next inserts would take numbers the
	// rows hold). Backups made before them have none. Each is where it was before the dump: the
	// dump holds it there or further on.
	Sequences []Sequence `json:"sequences,omitempty"`
	// ValuesAsText says how the checksums and row digests read values as text: ValuesAsTextFixed
	// in ferry's fixed session settings (UTC, ISO dates, pg_dump's float digits, hex bytea),
	// which two servers set up otherwise share; empty in each server's own, as backups made
	// before it were read, and a target is then read so too.
	ValuesAsText string `json:"valuesAsText,omitempty"`
}

// ValuesAsTextFixed is Database.ValuesAsText of entries read in ferry's fixed session settings.
const ValuesAsTextFixed = "fixed"

// Sequence is a sequence of a database and the next value it gives; Schema as Table's.
type Sequence struct {
	Schema string `json:"schema"`
	Name   string `json:"name"`
	Next   int64  `json:"next"`
}

// LargeObjects is the number of a PostgreSQL database's large objects and a checksum of their
// oids and contents, taken as its tables' are.
type LargeObjects struct {
	Database string `json:"database"`
	Count    int64  `json:"count"`
	Checksum string `json:"checksum"`
	// BeforeDump is as Table's.
	BeforeDump *Reading `json:"beforeDump,omitempty"`
}

// WrittenWhileDumped names d's tables, as schema.table, and large objects, as
// database.pg_catalog.pg_largeobject, that were written to while d was dumped (BeforeDump).
func (d Database) WrittenWhileDumped() []string {
	var out []string
	for _, t := range d.Tables {
		if t.BeforeDump != nil {
			out = append(out, t.Schema+"."+t.Name)
		}
	}
	for _, lo := range d.LargeObjects {
		if lo.BeforeDump != nil {
			out = append(out, lo.Database+".pg_catalog.pg_largeobject")
		}
	}
	return out
}

// Reading is a count and a checksum of a table's rows (or a database's large objects).
type Reading struct {
	Count    int64  `json:"count"`
	Checksum string `json:"checksum"`
}

// Table is one table's row count and checksum, read after the dump: PostgreSQL's both in one
// snapshot of the database; MySQL's count in one snapshot of the schemas and its CHECKSUM TABLE
// of the table as it is when read (a table written to meanwhile has a reading of no one moment,
// which a target then matches only by chance, and verify names it as not checked).
type Table struct {
	Schema   string `json:"schema"`
	Name     string `json:"name"`
	Rows     int64  `json:"rows"`
	Checksum string `json:"checksum"`
	// BeforeDump is the count and checksum read before the dump, kept when they are not those
	// read after it: the table was written to while it was dumped (its database was not
	// quiesced), and the dump holds it as one moment between the two, which neither reading
	// may be.
	BeforeDump *Reading `json:"beforeDump,omitempty"`
	// Columns are the table's columns in order, and Key the columns of its primary key (none
	// without one), as dumped. Backups made before them have neither.
	Columns []Column `json:"columns,omitempty"`
	Key     []string `json:"key,omitempty"`
}

// Column is a table's column: its name and its type as the engine states it.
type Column struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// Bucket is a copied bucket: each object under Prefix at its escaped key.
type Bucket struct {
	Name    string         `json:"name"`
	Prefix  string         `json:"prefix"`
	Bytes   int64          `json:"bytes"`
	Objects []BucketObject `json:"objects"`
	// Metadata is the file of the objects' metadata (ObjectMetadata by key, of the objects that
	// have any), a stream like the objects, so encrypted when the backup is: user metadata may be
	// as secret as the bytes. Backups made before it have none.
	Metadata string `json:"metadata,omitempty"`
	// Settings is the file of the bucket's settings (BucketSettings), a stream like Metadata.
	// Backups made before it have none, and their buckets' settings are neither restored nor
	// compared.
	Settings string `json:"settings,omitempty"`
	// Locks says the objects' locks (ObjectMetadata's Retention and LegalHold) were read. A
	// backup made before them, or whose store did not let them be read, holds none: a restore and
	// verify leave the target's objects' locks as they are.
	Locks bool `json:"locks,omitempty"`
	// EncryptionRead says the objects' server-side encryption (ObjectMetadata's Encryption) was
	// read. A backup made before it holds none, and an incremental backup does not reuse its
	// objects: a restore of them would put in clear what the store kept encrypted.
	EncryptionRead bool `json:"encryptionRead,omitempty"`
	// Reused objects, of ReusedBytes, had not changed since the backup ReusedFrom: their stored
	// files were copied from it in the storage, not read from the store again.
	Reused      int    `json:"reused,omitempty"`
	ReusedBytes int64  `json:"reusedBytes,omitempty"`
	ReusedFrom  string `json:"reusedFrom,omitempty"`
}

// ObjectMetadata is what a bucket object carries beside its bytes, as its store returns it.
type ObjectMetadata struct {
	ContentType        string            `json:"contentType,omitempty"`
	ContentEncoding    string            `json:"contentEncoding,omitempty"`
	ContentDisposition string            `json:"contentDisposition,omitempty"`
	ContentLanguage    string            `json:"contentLanguage,omitempty"`
	CacheControl       string            `json:"cacheControl,omitempty"`
	User               map[string]string `json:"user,omitempty"` // x-amz-meta-*, without the prefix
	// Tags are the object's tags (x-amz-tagging), which a store may change without changing
	// the object's bytes, ETag or time.
	Tags map[string]string `json:"tags,omitempty"`
	// Retention is the object's own retention under its bucket's object lock, and LegalHold
	// says a legal hold is on it: what keeps it from being deleted or overwritten, which, like
	// tags, changes without its bytes. A store gives them only to a caller allowed to read them.
	Retention *ObjectRetention `json:"retention,omitempty"`
	LegalHold bool             `json:"legalHold,omitempty"`
	// Encryption is how the store keeps the object's bytes encrypted at rest (SSE-S3 or
	// SSE-KMS, by its own choice or the bucket's default); nil when it keeps them in clear.
	Encryption *ServerSideEncryption `json:"encryption,omitempty"`
}

// ServerSideEncryption is how a store encrypts what it keeps: its algorithm, "AES256" (SSE-S3,
// keys of the store's own) or "aws:kms" (SSE-KMS), and for SSE-KMS the key's ID as the store
// names it. The key is the store's: a backup holds its name only.
type ServerSideEncryption struct {
	Algorithm string `json:"algorithm"`
	KMSKeyID  string `json:"kmsKeyID,omitempty"`
}

// ObjectRetention is an object's retention: its mode (GOVERNANCE or COMPLIANCE) and the time
// it holds the object until.
type ObjectRetention struct {
	Mode  string    `json:"mode"`
	Until time.Time `json:"until"`
}

// BucketSettings are the settings of a bucket that decide how its users reach and keep its
// objects, as its store returns them; a setting the bucket does not have is empty.
type BucketSettings struct {
	// Versioning is "Enabled" or "Suspended"; "" for a bucket that never had it.
	Versioning string `json:"versioning,omitempty"`
	// Policy is the bucket's policy document (JSON).
	Policy string `json:"policy,omitempty"`
	// Lifecycle is the bucket's lifecycle configuration, in S3's XML.
	Lifecycle string            `json:"lifecycle,omitempty"`
	Tags      map[string]string `json:"tags,omitempty"`
	// ObjectLock is set for a bucket made with object lock, which only a new bucket can get.
	ObjectLock *ObjectLock `json:"objectLock,omitempty"`
	// Encryption is the bucket's default encryption of new objects.
	Encryption *ServerSideEncryption `json:"encryption,omitempty"`
	// Unread names the settings the store did not let the backup read (no permission, or a
	// store without them): a restore leaves them as the target has them, and verify does not
	// compare them.
	Unread []string `json:"unread,omitempty"`
}

// ObjectLock is a locked bucket's default retention of new objects; Mode is "" when it has none.
type ObjectLock struct {
	Mode     string `json:"mode,omitempty"` // GOVERNANCE or COMPLIANCE
	Validity uint   `json:"validity,omitempty"`
	Unit     string `json:"unit,omitempty"` // DAYS or YEARS
}

// BucketObject is one object of a bucket as copied.
type BucketObject struct {
	Key    string `json:"key"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// Stored names the object's file under the bucket's Prefix when it is not the escaped key:
	// a key too long once escaped for a file name or a storage key is stored under its hash.
	Stored string `json:"stored,omitempty"`
	// ETag and Modified are what the store said of the object copied: a later backup of the same
	// store that lists the key with the same size, ETag and time copies this backup's stored
	// object instead of reading it again. Backups made before them have neither.
	ETag     string    `json:"etag,omitempty"`
	Modified time.Time `json:"modified,omitzero"`
}

// Volume is a claim's contents: a tar stream of its tree and the list of its files.
type Volume struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Key       string `json:"key"`
	Bytes     int64  `json:"bytes"` // of the files' contents
	// List is the stream of the volume's files (format 4); read it with Reader.VolumeFiles.
	List *FileList `json:"list,omitempty"`
	// Xattrs says its entries hold their files' extended attributes that move (File.Xattrs):
	// a restore gives each file exactly those, and verify compares them. A backup before ferry
	// moved them does not: its restore leaves the target's, and its verify does not compare them.
	Xattrs bool `json:"xattrs,omitempty"`
	// Root is the claim's root folder (path "./"): its mode, owner, time and extended attributes,
	// which its data may need (a shared folder's setgid bit and default ACL). A backup before
	// ferry moved them has none: its restore leaves the target's root as it is.
	Root *File `json:"root,omitempty"`
	// Files are the volume's files in a manifest of format 3 or older, which kept them inline.
	Files []File `json:"files,omitempty"`
	// Format is how Key holds the volume's data: "" a zstd-compressed tar stream, FormatChunks a
	// tree stream whose file data lives in the chunk repository at Repo (see docs/format.md).
	Format string `json:"format,omitempty"`
	// Repo is the prefix in the storage of the chunk repository a chunked volume's data is in.
	Repo string `json:"repo,omitempty"`
	// NewPackBytes are the bytes of the packs a chunked volume's backup uploaded to Repo: what
	// it stored beyond the chunks earlier backups had stored.
	NewPackBytes int64 `json:"newPackBytes,omitempty"`
	// ReadBytes are the bytes of the files a chunked volume's backup read, and UnchangedFiles the
	// files it did not read, as unchanged since the claim's previous tree: an incremental
	// backup's work beside the volume's size.
	ReadBytes      int64 `json:"readBytes,omitempty"`
	UnchangedFiles int64 `json:"unchangedFiles,omitempty"`
}

// FormatChunks is Volume.Format of a volume stored as a tree stream over the chunk repository.
const FormatChunks = "chunks"

// FormatTar names, as a volume format a backup is asked for, one compressed tar stream per claim;
// it is Volume.Format "" in a manifest.
const FormatTar = "tar"

// VolumeFormatName names the volume format a backup is asked for in errors (a command line names
// its flag instead).
const VolumeFormatName = "volume format"

// ChunkedVolumes checks format, the volume format a backup is asked for ("" for the default), and
// says whether the backup stores the volumes it reads through exec in the chunk repository. The
// default is chunks through exec for a backup that is not encrypted, and tar otherwise: direct
// movers write tar themselves, and an encrypted backup gains nothing from chunks (its writer
// cannot read the previous tree, and each run's repository key is its own) while its repository
// cannot be pruned without the identity.
func ChunkedVolumes(format string, direct, encrypted bool) (bool, error) {
	switch format {
	case "":
		return !direct && !encrypted, nil
	case FormatTar:
		return false, nil
	case FormatChunks:
		if direct {
			return false, badinput.Value(VolumeFormatName, FormatChunks, "chunks are read through exec: direct movers write tar")
		}
		return true, nil
	}
	return false, badinput.Value(VolumeFormatName, fmt.Sprintf("%.40q", format), "want %s or %s", FormatTar, FormatChunks)
}

// File is an entry of a volume. Path, Link and Hardlink are names as the filesystem has them,
// bytes that need not be UTF-8: see MarshalJSON.
type File struct {
	Path    string    `json:"path"`
	Type    string    `json:"type"` // file, dir, symlink or fifo
	Mode    string    `json:"mode"`
	UID     int       `json:"uid"`
	GID     int       `json:"gid"`
	Size    int64     `json:"size,omitempty"`
	ModTime time.Time `json:"modTime"`
	Link    string    `json:"link,omitempty"`
	// Hardlink, of a file, names the first entry of the volume that is the same file (inode).
	Hardlink string `json:"hardlink,omitempty"`
	SHA256   string `json:"sha256,omitempty"`
	// Xattrs are the extended attributes of a file or directory that move with it (a user's,
	// POSIX ACLs, file capabilities): name -> value in base64.
	Xattrs map[string]string `json:"xattrs,omitempty"`
}

// Skipped is an item left out of the backup.
type Skipped struct {
	Kind   string `json:"kind"` // volume, database, bucket, object
	Name   string `json:"name"`
	Reason string `json:"reason"`
	// Namespace is the namespace of a Velero backup's volume data (Reader.VeleroVolumes), when
	// it has one; never stored.
	Namespace string `json:"-"`
}

// Stream is a file of the backup as written.
type Stream struct {
	Key    string `json:"key"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// Totals sum up the backup.
type Totals struct {
	Objects     int   `json:"objects"`
	ObjectBytes int64 `json:"objectBytes"`
	StoredBytes int64 `json:"storedBytes"`
	Skipped     int   `json:"skipped"`
}

// Writer makes one backup.
type Writer struct {
	store      storage.Backend
	name       string
	recipients []age.Recipient

	mu       sync.Mutex
	manifest Manifest
	progress Progress

	keyMu     sync.Mutex // held while the digest key is made and stored
	digestKey []byte

	holds []holding // see Hold

	recentOnce sync.Once // see Recent
	recent     []Previous
}

// Hold keeps release to run at Release, once the manifest is written or the backup failed: a
// chunk repository's writer holds its lock until the backup that references its chunks is
// recorded, so that a prune running meanwhile keeps them. held says whether it still holds it:
// Commit writes no manifest when it does not.
func (w *Writer) Hold(release func(context.Context) error, held func() error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.holds = append(w.holds, holding{release: release, held: held})
}

// holding is what Hold keeps.
type holding struct {
	release func(context.Context) error
	held    func() error
}

// Release runs what Hold kept, each once.
func (w *Writer) Release(ctx context.Context) error {
	w.mu.Lock()
	holds := w.holds
	w.holds = nil
	w.mu.Unlock()
	var errs []error
	for _, h := range holds {
		errs = append(errs, h.release(ctx))
	}
	return errors.Join(errs...)
}

// Progress receives a backup's stored bytes as they are written and its objects as they are
// recorded (internal/progress shows them). It must be safe for concurrent use.
type Progress interface {
	AddBytes(n int64)
	AddObjects(n int)
}

// SetProgress has the writer report to p; call it before writing.
func (w *Writer) SetProgress(p Progress) { w.progress = p }

// ErrExists matches the error of Create when the name is taken.
var ErrExists = errors.New("backup already exists")

// Create claims the name in storage (of concurrent claims exactly one wins) and starts a backup.
// An existing backup, complete or not, is never overwritten. With recipients, every file but the
// manifest is encrypted to them with age.
func Create(ctx context.Context, store storage.Backend, name string, source plans.Cluster, plan *plans.Plan, now time.Time, recipients []string) (*Writer, error) {
	parsed, err := ParseRecipients(recipients)
	if err != nil {
		return nil, err
	}
	if err := CheckName(name); err != nil {
		return nil, err
	}
	claim, _ := json.Marshal(map[string]any{"name": name, "startedAt": now.UTC()})
	if err := store.Create(ctx, Prefix(name)+ClaimFile, bytes.NewReader(claim)); err != nil {
		if errors.Is(err, storage.ErrExists) {
			return nil, fmt.Errorf("%s in %s: %w", name, store, ErrExists)
		}
		return nil, err
	}
	w := &Writer{store: store, name: name, recipients: parsed, manifest: Manifest{
		FormatVersion: FormatVersion, Name: name, Tool: buildinfo.Read(), Source: source, StartedAt: now.UTC(), Plan: plan,
	}}
	if len(parsed) > 0 {
		w.manifest.Encryption = &Encryption{Format: "age", Recipients: recipients, Suffix: EncryptedSuffix}
	}
	return w, nil
}

// RecipientName names a recipient in errors (a command line names its flag instead).
const RecipientName = "recipient"

// ParseRecipients reads age recipients ("age1..."). A value that is not one is shown only when it
// looks like a recipient: anything else may be a secret given by mistake, an age identity most
// of all, and the error goes to terminals and CI logs (age's own error quotes the value whole).
func ParseRecipients(recipients []string) ([]age.Recipient, error) {
	var out []age.Recipient
	for i, r := range recipients {
		parsed, err := age.ParseX25519Recipient(r)
		if err != nil {
			which := fmt.Sprintf("(value %d of %d)", i+1, len(recipients))
			switch upper := strings.ToUpper(r); {
			case strings.HasPrefix(upper, "AGE-SECRET-KEY-") || strings.HasPrefix(upper, "AGE-PLUGIN-"):
				return nil, badinput.Value(RecipientName, which, "is an age identity, a secret key, not shown: give its recipient (age-keygen -y prints it) and keep the identity to read the backup")
			case strings.HasPrefix(r, "age1"):
				return nil, badinput.Value(RecipientName, strconv.Quote(r), "not an age X25519 recipient: %s", strings.TrimPrefix(err.Error(), fmt.Sprintf("malformed recipient %q: ", r)))
			default:
				return nil, badinput.Value(RecipientName, which, "%d characters, not shown: not an age recipient (age1...)", len(r))
			}
		}
		out = append(out, parsed)
	}
	return out, nil
}

// Encrypted reports whether the backup's files are encrypted.
func (w *Writer) Encrypted() bool { return len(w.recipients) > 0 }

// Name is the backup's name.
func (w *Writer) Name() string { return w.name }

// StoredName is the name a file of the backup is stored under (encrypted files get a suffix).
func (w *Writer) StoredName(file string) string {
	if w.Encrypted() {
		return file + EncryptedSuffix
	}
	return file
}

// StorageKey is the full key of a file of the backup in its storage.
func (w *Writer) StorageKey(file string) string { return Prefix(w.name) + w.StoredName(file) }

// Recipients are the age recipients the backup is encrypted to, if any.
func (w *Writer) Recipients() []string {
	if w.manifest.Encryption == nil {
		return nil
	}
	return w.manifest.Encryption.Recipients
}

// Record notes a file another process (a mover uploading directly) wrote to the backup.
func (w *Writer) Record(s Stream) {
	w.record(s)
	if w.progress != nil {
		w.progress.AddBytes(s.Bytes)
	}
}

// record keeps what was stored at a key: a file put again (a stream retried) replaces the first.
func (w *Writer) record(s Stream) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, old := range w.manifest.Streams {
		if old.Key == s.Key {
			w.manifest.Totals.StoredBytes -= old.Bytes
			if w.progress != nil { // counted as it was stored, and no longer held
				w.progress.AddBytes(-old.Bytes)
			}
			w.manifest.Streams = slices.Delete(w.manifest.Streams, i, i+1)
			break
		}
	}
	w.manifest.Streams = append(w.manifest.Streams, s)
	w.manifest.Totals.StoredBytes += s.Bytes
}

// CopyStream stores the stream s of the backup from in this one under the same name, copied in
// the storage (storage.Copier), reads the copy back to check its size and SHA-256 against from's
// manifest, and records it. It is how a bucket's objects that did not change since from are
// backed up. A copy that fails its check is removed, and is an error matching ErrCorrupt: the
// caller stores the stream anew. Encrypted backups copy nothing (from's recipients may not be
// this one's), nor does a storage that cannot: either is an error matching errors.ErrUnsupported.
func (w *Writer) CopyStream(ctx context.Context, from string, s Stream) error {
	c, ok := w.store.(storage.Copier)
	if !ok || w.Encrypted() || strings.HasSuffix(s.Key, EncryptedSuffix) {
		return fmt.Errorf("copy %s from backup %s: %w", s.Key, from, errors.ErrUnsupported)
	}
	dst := Prefix(w.name) + s.Key
	if err := c.Copy(ctx, Prefix(from)+s.Key, dst, s.Bytes); err != nil {
		return fmt.Errorf("copy %s from backup %s: %w", s.Key, from, err)
	}
	// The copy is read back and checked against from's manifest before this backup records it:
	// a file of from damaged or written again since would otherwise be recorded as the object.
	// Reading the storage is still far cheaper than reading the object's store through the API
	// server, and nothing is uploaded.
	rc, err := w.store.Get(ctx, dst)
	if err != nil {
		return fmt.Errorf("copy %s from backup %s: %w", s.Key, from, err)
	}
	checked := &checkedReader{rc: rc, file: w.name + "/" + s.Key, want: &s, h: sha256.New()}
	_, err = io.Copy(io.Discard, checked)
	if cerr := rc.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		w.store.Delete(context.WithoutCancel(ctx), dst) // not this backup's: it was never recorded
		return fmt.Errorf("copy %s from backup %s: %w", s.Key, from, err)
	}
	w.record(s)
	if w.progress != nil {
		w.progress.AddBytes(s.Bytes)
	}
	return nil
}

// Put uploads one file of the backup as it is read, encrypted when the backup is, recording its
// stored size and SHA-256. It returns the file's name as stored.
func (w *Writer) Put(ctx context.Context, file string, r io.Reader) (string, error) {
	if w.Encrypted() {
		file += EncryptedSuffix
		r = Encrypt(r, w.recipients)
	}
	h := sha256.New()
	counter := &countingWriter{progress: w.progress}
	if err := w.store.Put(ctx, Prefix(w.name)+file, io.TeeReader(r, io.MultiWriter(h, counter))); err != nil {
		if w.progress != nil { // nothing was stored: a stream run again counts once
			w.progress.AddBytes(-counter.n)
		}
		return "", err
	}
	w.record(Stream{Key: file, Bytes: counter.n, SHA256: hex.EncodeToString(h.Sum(nil))}) // its progress was counted as read
	return file, nil
}

// PutPlain uploads a file that is never encrypted: Velero's metadata, for backups that are not.
func (w *Writer) PutPlain(ctx context.Context, file string, r io.Reader) error {
	if w.Encrypted() {
		return fmt.Errorf("%s: a plain file in an encrypted backup", file)
	}
	_, err := w.Put(ctx, file, r)
	return err
}

// Encrypt returns a reader of r's bytes encrypted with age, produced as they are read.
func Encrypt(r io.Reader, recipients []age.Recipient) io.Reader {
	pr, pw := io.Pipe()
	go func() {
		enc, err := age.Encrypt(pw, recipients...)
		if err == nil {
			_, err = io.Copy(enc, r)
			if cerr := enc.Close(); err == nil {
				err = cerr
			}
		}
		pw.CloseWithError(err)
	}()
	return pr
}

// AddObjects records backed-up objects.
func (w *Writer) AddObjects(objs []Object, bytes int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.manifest.Objects = append(w.manifest.Objects, objs...)
	w.manifest.Totals.Objects += len(objs)
	w.manifest.Totals.ObjectBytes += bytes
	if w.progress != nil {
		w.progress.AddObjects(len(objs))
	}
}

// Objects is how many objects the backup holds so far.
func (w *Writer) Objects() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.manifest.Totals.Objects
}

// AddDatabase records a database's dump.
func (w *Writer) AddDatabase(d Database) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.manifest.Databases = append(w.manifest.Databases, d)
}

// AddBucket records a copied bucket.
func (w *Writer) AddBucket(b Bucket) {
	w.mu.Lock()
	defer w.mu.Unlock()
	sort.Slice(b.Objects, func(i, j int) bool { return b.Objects[i].Key < b.Objects[j].Key })
	w.manifest.Buckets = append(w.manifest.Buckets, b)
}

// AddVolume records a volume's contents.
func (w *Writer) AddVolume(v Volume) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.manifest.Volumes = append(w.manifest.Volumes, v)
}

// Skip records an item the backup does not hold.
func (w *Writer) Skip(kind, name, reason string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.manifest.Skipped = append(w.manifest.Skipped, Skipped{Kind: kind, Name: name, Reason: reason})
	w.manifest.Totals.Skipped++
}

// NoData records an item the plan named that holds no data, so that there is nothing to copy.
func (w *Writer) NoData(kind, name, reason string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.manifest.NoData = append(w.manifest.NoData, Skipped{Kind: kind, Name: name, Reason: reason})
}

// SetSchedule records the schedule that makes this backup.
func (w *Writer) SetSchedule(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.manifest.Schedule = name
}

// SetVeleroCompatible records whether the Velero files are part of the backup.
func (w *Writer) SetVeleroCompatible(ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.manifest.VeleroCompatible = ok
}

// Commit writes the manifest, last, which makes the backup complete, and returns it.
func (w *Writer) Commit(ctx context.Context, now time.Time) (*Manifest, error) {
	w.mu.Lock()
	m := w.manifest
	holds := w.holds
	w.mu.Unlock()
	for _, h := range holds {
		if err := h.held(); err != nil {
			return nil, fmt.Errorf("backup %s is not recorded: %w", w.name, err)
		}
	}
	m.CompletedAt = now.UTC()
	sort.Slice(m.Objects, func(i, j int) bool {
		a, b := m.Objects[i], m.Objects[j]
		return a.Resource+"."+a.Group+"/"+a.Namespace+"/"+a.Name < b.Resource+"."+b.Group+"/"+b.Namespace+"/"+b.Name
	})
	sort.Slice(m.Streams, func(i, j int) bool { return m.Streams[i].Key < m.Streams[j].Key })
	// Kinds are captured at the same time: their skipped items are kept together, each kind's
	// in the order it found them.
	sort.SliceStable(m.Skipped, func(i, j int) bool { return m.Skipped[i].Kind < m.Skipped[j].Kind })
	sort.Slice(m.NoData, func(i, j int) bool {
		a, b := m.NoData[i], m.NoData[j]
		return a.Kind+" "+a.Name < b.Kind+" "+b.Name
	})
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := w.store.Create(ctx, Prefix(w.name)+ManifestFile, bytes.NewReader(data)); err != nil {
		return nil, fmt.Errorf("write the manifest of %s: %w", w.name, err)
	}
	return &m, nil
}

type countingWriter struct {
	n        int64
	progress Progress
}

func (c *countingWriter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	if c.progress != nil {
		c.progress.AddBytes(int64(len(p)))
	}
	return len(p), nil
}

// Info describes a backup found in storage.
type Info struct {
	Name string `json:"name"`
	// State is complete, running, incomplete or velero, as Classify decides it; "unreadable" for
	// a backup whose manifest cannot be read (Error says why).
	State       string    `json:"state"`
	Files       int       `json:"files"`
	Bytes       int64     `json:"bytes"`
	CompletedAt time.Time `json:"completedAt,omitzero"`
	Error       string    `json:"error,omitempty"`
}

// Unreadable is the state List gives a backup whose manifest is there but cannot be read or
// fails its checks: it is neither complete nor anything else.
const Unreadable = "unreadable"

// List describes every backup in storage, by name. A backup whose manifest cannot be read is
// listed as Unreadable, and the error names each.
func List(ctx context.Context, store storage.Backend) ([]Info, error) {
	sts, errs, err := Scan(ctx, store, time.Now())
	if err != nil {
		return nil, err
	}
	out := make([]Info, 0, len(sts)+len(errs))
	for _, st := range sts {
		out = append(out, Info{Name: st.Name, State: st.State, Files: st.Files, Bytes: st.Bytes, CompletedAt: st.CompletedAt})
	}
	var all []error
	for name, e := range errs {
		out = append(out, Info{Name: name, State: Unreadable, Error: e.Error()})
		all = append(all, e)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, errors.Join(all...)
}

// ReadManifest reads a complete backup's manifest and checks it: its format version (a newer
// one is bad input, naming both), its name, and its record of each stream. A manifest that is
// there but fails a check is an error matching ErrBadManifest.
func ReadManifest(ctx context.Context, store storage.Reader, name string) (*Manifest, error) {
	rc, err := store.Get(ctx, Prefix(name)+ManifestFile)
	if errors.Is(err, storage.ErrNotExist) {
		return nil, badinput.Errorf("backup %q has no manifest: it does not exist or is incomplete (see ferry backups list)", name)
	}
	if err != nil {
		return nil, fmt.Errorf("backup %s: %w", name, err)
	}
	defer rc.Close()
	return DecodeManifest(rc, name)
}

// DecodeManifest reads and checks the manifest of backup name from r (see ReadManifest).
func DecodeManifest(r io.Reader, name string) (*Manifest, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("backup %s: %s: %w: %s", name, ManifestFile, ErrBadManifest, fmt.Sprintf(format, args...))
	}
	dec := json.NewDecoder(r)
	var m Manifest
	if err := dec.Decode(&m); err != nil {
		return nil, bad("%v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, bad("data after the manifest")
	}
	if err := checkFormat(name, m.FormatVersion); err != nil {
		return nil, err
	}
	if m.Name != name {
		return nil, badinput.Errorf("backup %s: its manifest names backup %q: it was copied or tampered with", name, m.Name)
	}
	seen := make(map[string]bool, len(m.Streams))
	for _, s := range m.Streams {
		if s.Key == "" || strings.HasPrefix(s.Key, "/") || strings.Contains("/"+s.Key+"/", "/../") {
			return nil, bad("stream %q: not a file of the backup", s.Key)
		}
		if seen[s.Key] {
			return nil, bad("stream %q recorded twice", s.Key)
		}
		seen[s.Key] = true
		if s.Bytes < 0 {
			return nil, bad("stream %s: %d bytes", s.Key, s.Bytes)
		}
		if b, err := hex.DecodeString(s.SHA256); err != nil || len(b) != sha256.Size {
			return nil, bad("stream %s: sha256 %q is not a SHA-256", s.Key, s.SHA256)
		}
	}
	if m.Encryption != nil && m.Encryption.Format != "age" {
		return nil, bad("encryption %q: want age", m.Encryption.Format)
	}
	if err := checkDigests(name, &m, seen); err != nil {
		return nil, err
	}
	if err := checkFileLists(name, &m, seen); err != nil {
		return nil, err
	}
	return &m, nil
}

// Delete removes a backup completely: the manifest first, so that a backup being deleted is never
// taken for a complete one, velero-backup.json right after it, so that Velero and ferry never take
// it for one of Velero's, then every other file, and ferry's claim last, so that whatever an
// interrupted delete leaves is an incomplete ferry backup (Classify). It reports how many files
// it removed.
func Delete(ctx context.Context, store storage.Backend, name string) (int, error) {
	if err := CheckName(name); err != nil {
		return 0, err
	}
	var keys []string
	if err := store.List(ctx, Prefix(name), func(o storage.ObjectInfo) error { keys = append(keys, o.Key); return nil }); err != nil {
		return 0, err
	}
	if len(keys) == 0 {
		return 0, badinput.Errorf("no backup named %q in %s", name, store)
	}
	rank := func(key string) int {
		switch strings.TrimPrefix(key, Prefix(name)) {
		case ManifestFile:
			return 0
		case VeleroFile:
			return 1
		case ClaimFile:
			return 3
		}
		return 2
	}
	sort.SliceStable(keys, func(i, j int) bool { return rank(keys[i]) < rank(keys[j]) })
	for i, k := range keys {
		if err := store.Delete(ctx, k); err != nil {
			return i, err
		}
	}
	// What an interrupted upload left is never listed: only the backend finds it.
	if cleaner, ok := store.(storage.PartialCleaner); ok {
		n, err := cleaner.CleanPartial(ctx, Prefix(name))
		return len(keys) + n, err
	}
	return len(keys), nil
}

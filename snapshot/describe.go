package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/internal/buildinfo"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/storage"
	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
)

// Description is what `ferry backups describe` shows of one backup.
type Description struct {
	Name string `json:"name"`
	// State is complete, running, incomplete or velero (a backup Velero wrote), as Classify decides.
	State string `json:"state"`
	// Files and Bytes are what storage holds under the backup's folder.
	Files int   `json:"files"`
	Bytes int64 `json:"bytes"`
	// ClaimedAt is when the backup that left an incomplete one behind started, when its claim is there.
	ClaimedAt time.Time `json:"claimedAt,omitzero"`
	// Run says of a backup without a manifest whether its ferry is still writing it (live: state
	// running) or was stopped (dead: incomplete), by its heartbeat, last stored at LastBeat.
	Run      RunState  `json:"run,omitempty"`
	LastBeat time.Time `json:"lastBeat,omitzero"`
	// Summary is set for a complete backup; its fields sit beside the ones above in JSON.
	*Summary
	// Velero is set for a backup Velero wrote: what its velero-backup.json says.
	Velero *VeleroSummary `json:"velero,omitempty"`
	// VeleroVolumes is the volume data of a backup Velero wrote that ferry does not restore.
	VeleroVolumes []Skipped `json:"veleroVolumes,omitempty"`
}

// Summary counts what a complete backup holds, from its manifest.
type Summary struct {
	Source           plans.Cluster  `json:"source"`
	Tool             buildinfo.Info `json:"tool"`
	StartedAt        time.Time      `json:"startedAt"`
	CompletedAt      time.Time      `json:"completedAt"`
	DurationSeconds  float64        `json:"durationSeconds"`
	Encryption       *Encryption    `json:"encryption,omitempty"`
	Protection       Protection     `json:"protection"`
	VeleroCompatible bool           `json:"veleroCompatible"`
	Objects          int            `json:"objects"`
	ObjectBytes      int64          `json:"objectBytes"` // of the objects as JSON
	// Kinds counts the objects by group and kind, sorted by group, then kind.
	Kinds     []KindCount       `json:"kinds"`
	Volumes   []VolumeSummary   `json:"volumes"`
	Databases []DatabaseSummary `json:"databases"`
	Buckets   []BucketSummary   `json:"buckets"`
	// StoredBytes is the size of every file the backup wrote, as stored (compressed, encrypted).
	StoredBytes int64     `json:"storedBytes"`
	Skipped     []Skipped `json:"skipped"`
	// NoData is what the plan named that held no data to copy (manifest's NoData).
	NoData []Skipped `json:"noData,omitempty"`
}

// Protection says what of a backup is encrypted, to which recipients, and what anyone who can
// read its storage reads in plain text.
type Protection struct {
	Encrypted  []string `json:"encrypted"`
	Recipients []string `json:"recipients,omitempty"`
	Plaintext  []string `json:"plaintext"`
}

// ProtectionOf is the protection of a backup written with enc (nil: not encrypted). It is the
// one place that says what a backup's encryption covers: every file but the manifest (and the
// heartbeat while it is written).
func ProtectionOf(enc *Encryption) Protection {
	if enc == nil {
		return Protection{Encrypted: []string{},
			Plaintext: []string{"everything: the objects (Secrets included), database dumps, volume files, bucket objects and the manifest"}}
	}
	return Protection{
		Encrypted: []string{"the object archive (Secrets included)", "database dumps", "volume files",
			"bucket objects", "the digest key of Secrets' digests"},
		Recipients: enc.Recipients,
		Plaintext: []string{
			"the manifest: names of namespaces, objects, claims, files, databases, schemas, tables, buckets and bucket keys",
			"sizes, file modes, owners and times, row counts",
			"digests: keyed for Secrets (HMAC with the encrypted digest key); plain SHA-256 for other objects, files and bucket objects, and tables' checksums",
			"the heartbeat, while the backup is written",
		},
	}
}

// KindCount is how many objects of one kind a backup holds.
type KindCount struct {
	Group string `json:"group"` // "" for the core group
	Kind  string `json:"kind"`
	Count int    `json:"count"`
}

// VolumeSummary is a claim's contents in a backup.
type VolumeSummary struct {
	Namespace   string `json:"namespace"`
	Name        string `json:"name"`
	Files       int    `json:"files"` // regular files; directories and symlinks are not counted
	Bytes       int64  `json:"bytes"` // of the files' contents
	StoredBytes int64  `json:"storedBytes"`
	// Format is the volume's (snapshot.Volume.Format); of a chunked volume StoredBytes are its
	// tree and file list, and NewPackBytes what it added to the chunk repository.
	Format       string `json:"format,omitempty"`
	NewPackBytes int64  `json:"newPackBytes,omitempty"`
}

// DatabaseSummary is a database's dump in a backup.
type DatabaseSummary struct {
	Name        string `json:"name"`
	Engine      string `json:"engine"`
	Schemas     int    `json:"schemas"`
	Tables      int    `json:"tables"`
	Rows        int64  `json:"rows"`      // summed over its tables
	DumpBytes   int64  `json:"dumpBytes"` // of the SQL, before compression
	StoredBytes int64  `json:"storedBytes"`
}

// BucketSummary is a bucket's copy in a backup.
type BucketSummary struct {
	Name        string `json:"name"`
	Objects     int    `json:"objects"`
	Bytes       int64  `json:"bytes"`
	StoredBytes int64  `json:"storedBytes"`
	// Reused objects had not changed since the backup ReusedFrom, and were copied from it in the
	// storage.
	Reused     int    `json:"reused,omitempty"`
	ReusedFrom string `json:"reusedFrom,omitempty"`
}

// VeleroSummary is what velero-backup.json says of a backup Velero wrote.
type VeleroSummary struct {
	Phase              string    `json:"phase"`
	FormatVersion      string    `json:"formatVersion,omitempty"`
	StartedAt          time.Time `json:"startedAt,omitzero"`
	CompletedAt        time.Time `json:"completedAt,omitzero"`
	Expiration         time.Time `json:"expiration,omitzero"`
	TotalItems         int       `json:"totalItems"`
	ItemsBackedUp      int       `json:"itemsBackedUp"`
	Errors             int       `json:"errors"`
	Warnings           int       `json:"warnings"`
	FailureReason      string    `json:"failureReason,omitempty"`
	IncludedNamespaces []string  `json:"includedNamespaces,omitempty"`
	ExcludedNamespaces []string  `json:"excludedNamespaces,omitempty"`
	StorageLocation    string    `json:"storageLocation,omitempty"`
}

// Summarize counts what a manifest records: objects by kind, each volume's files, each database's
// tables and rows, each bucket's objects, and what each of them takes in storage.
func Summarize(m *Manifest) Summary {
	s := Summary{
		Source: m.Source, Tool: m.Tool, StartedAt: m.StartedAt, CompletedAt: m.CompletedAt,
		Encryption: m.Encryption, Protection: ProtectionOf(m.Encryption), VeleroCompatible: m.VeleroCompatible,
		Objects: len(m.Objects), ObjectBytes: m.Totals.ObjectBytes, StoredBytes: m.Totals.StoredBytes,
		Kinds: []KindCount{}, Volumes: []VolumeSummary{}, Databases: []DatabaseSummary{}, Buckets: []BucketSummary{},
		Skipped: append([]Skipped{}, m.Skipped...), NoData: m.NoData,
	}
	if !m.StartedAt.IsZero() && m.CompletedAt.After(m.StartedAt) {
		s.DurationSeconds = m.CompletedAt.Sub(m.StartedAt).Seconds()
	}
	stored := make(map[string]int64, len(m.Streams))
	for _, st := range m.Streams {
		stored[st.Key] = st.Bytes
	}

	counts := map[KindCount]int{}
	for _, o := range m.Objects {
		counts[KindCount{Group: o.Group, Kind: o.Kind}]++
	}
	for k, n := range counts {
		k.Count = n
		s.Kinds = append(s.Kinds, k)
	}
	sort.Slice(s.Kinds, func(i, j int) bool {
		a, b := s.Kinds[i], s.Kinds[j]
		return a.Group < b.Group || a.Group == b.Group && a.Kind < b.Kind
	})

	for _, v := range m.Volumes {
		vs := VolumeSummary{Namespace: v.Namespace, Name: v.Name, StoredBytes: stored[v.Key], Format: v.Format, NewPackBytes: v.NewPackBytes}
		if v.List != nil {
			vs.Files, vs.Bytes = int(v.List.Files), v.List.FileBytes
			vs.StoredBytes += stored[v.List.Key]
		}
		for _, f := range v.Files {
			if f.Type == "file" {
				vs.Files++
				vs.Bytes += f.Size
			}
		}
		s.Volumes = append(s.Volumes, vs)
	}
	for _, d := range m.Databases {
		ds := DatabaseSummary{Name: d.Name, Engine: d.Engine, Schemas: len(d.Schemas), Tables: len(d.Tables), DumpBytes: d.Bytes, StoredBytes: stored[d.Key]}
		for _, t := range d.Tables {
			ds.Rows += t.Rows
		}
		s.Databases = append(s.Databases, ds)
	}
	for _, b := range m.Buckets {
		bs := BucketSummary{Name: b.Name, Objects: len(b.Objects), Reused: b.Reused, ReusedFrom: b.ReusedFrom}
		for _, o := range b.Objects {
			bs.Bytes += o.Size
		}
		if b.Prefix != "" { // every object of the bucket is stored under its prefix
			for key, n := range stored {
				if strings.HasPrefix(key, b.Prefix) {
					bs.StoredBytes += n
				}
			}
		}
		s.Buckets = append(s.Buckets, bs)
	}
	return s
}

// Describe finds a backup in storage and describes it, in the state Classify decides at now: from
// its manifest when it is complete, from velero-backup.json when Velero wrote it, and from its
// files and heartbeat when it is running or incomplete. A name that no backup has is bad input; a
// manifest that cannot be read or fails its checks is an error.
func Describe(ctx context.Context, store storage.Backend, name string, now time.Time) (*Description, error) {
	st, err := Inspect(ctx, store, name, now)
	if err != nil {
		return nil, err
	}
	d := &Description{Name: name, State: st.State, Files: st.Files, Bytes: st.Bytes}
	switch st.State {
	case Complete:
		m, err := ReadManifest(ctx, store, name)
		if err != nil {
			return nil, err
		}
		s := Summarize(m)
		d.Summary = &s
	case Velero:
		if d.Velero, err = readVeleroSummary(ctx, store, name); err != nil {
			return nil, err
		}
		if d.VeleroVolumes, err = readVeleroVolumes(ctx, store, name); err != nil {
			return nil, err
		}
	case Running:
		d.Run, d.LastBeat = RunLive, st.LastBeat
		if st.Claimed {
			if d.ClaimedAt, err = readClaimTime(ctx, store, name); err != nil {
				return nil, err
			}
		}
	case Incomplete:
		// A folder without ferry's claim or heartbeat was not written by a ferry backup: no run
		// to speak of.
		if st.Claimed || !st.LastBeat.IsZero() {
			d.Run, d.LastBeat = RunDead, st.LastBeat
		}
		if st.Claimed {
			if d.ClaimedAt, err = readClaimTime(ctx, store, name); err != nil {
				return nil, err
			}
		}
	}
	return d, nil
}

// readVeleroSummary reads what a backup's velero-backup.json says.
func readVeleroSummary(ctx context.Context, store storage.Reader, name string) (*VeleroSummary, error) {
	rc, err := store.Get(ctx, Prefix(name)+VeleroFile)
	if err != nil {
		return nil, fmt.Errorf("backup %s: %w", name, err)
	}
	defer rc.Close()
	var b velerov1.Backup
	if err := json.NewDecoder(rc).Decode(&b); err != nil {
		return nil, badinput.Errorf("backup %s: %s: %v", name, VeleroFile, err)
	}
	v := &VeleroSummary{
		Phase: string(b.Status.Phase), FormatVersion: b.Status.FormatVersion, Errors: b.Status.Errors, Warnings: b.Status.Warnings,
		FailureReason: b.Status.FailureReason, IncludedNamespaces: b.Spec.IncludedNamespaces, ExcludedNamespaces: b.Spec.ExcludedNamespaces,
		StorageLocation: b.Spec.StorageLocation,
	}
	if t := b.Status.StartTimestamp; t != nil {
		v.StartedAt = t.UTC()
	}
	if t := b.Status.CompletionTimestamp; t != nil {
		v.CompletedAt = t.UTC()
	}
	if t := b.Status.Expiration; t != nil {
		v.Expiration = t.UTC()
	}
	if p := b.Status.Progress; p != nil {
		v.TotalItems, v.ItemsBackedUp = p.TotalItems, p.ItemsBackedUp
	}
	return v, nil
}

// readClaimTime is when the backup that claimed the name started. A claim that cannot be parsed
// only leaves that line out of the description of a backup that is incomplete anyway.
func readClaimTime(ctx context.Context, store storage.Reader, name string) (time.Time, error) {
	rc, err := store.Get(ctx, Prefix(name)+ClaimFile)
	if errors.Is(err, storage.ErrNotExist) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("backup %s: %w", name, err)
	}
	defer rc.Close()
	var claim struct {
		StartedAt time.Time `json:"startedAt"`
	}
	if json.NewDecoder(rc).Decode(&claim) != nil {
		return time.Time{}, nil
	}
	return claim.StartedAt, nil
}

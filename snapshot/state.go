package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/storage"
)

// Backup states, as Classify decides them.
const (
	// Complete: ferry's manifest is there (it is written last and removed first).
	Complete = "complete"
	// Incomplete: a ferry backup whose ferry stopped, or whose delete was interrupted, or a
	// folder of files no backup tool finished. Never restorable.
	Incomplete = "incomplete"
	// Running: a ferry backup without a manifest whose heartbeat is fresh.
	Running = "running"
	// Velero: a backup Velero wrote (velero-backup.json and no file of ferry's).
	Velero = "velero"
)

// Classify decides a backup's state from the names of the files storage holds under
// backups/<name>/ and, for a ferry backup without a manifest, whether its heartbeat is fresh. It
// is the one place that decides it; list, describe, prune, restore and verify all go through it.
//
// ferry writes its claim first and its manifest last, and velero-backup.json before the manifest;
// delete removes the manifest first, velero-backup.json next, the claim last. So a claim or a
// heartbeat without a manifest is a ferry backup that did not finish (or did not finish going),
// whatever else is there: never Velero's.
func Classify(files map[string]bool, fresh bool) string {
	switch {
	case files[ManifestFile]:
		return Complete
	case files[ClaimFile] || files[HeartbeatFile]:
		if fresh {
			return Running
		}
		return Incomplete
	case files[VeleroFile]:
		return Velero
	default:
		return Incomplete
	}
}

// Status is a backup as storage holds it, and its state.
type Status struct {
	Name  string
	State string
	// Files and Bytes are what storage holds under the backup's folder.
	Files int
	Bytes int64
	// FirstWrite and LastWrite are when storage wrote its oldest and its newest file.
	FirstWrite, LastWrite time.Time
	// CompletedAt is when storage wrote the manifest (complete) or velero-backup.json (velero).
	CompletedAt time.Time
	// Claimed says ferry's claim is there.
	Claimed bool
	// Head is the start of a complete backup's manifest.
	Head ManifestHead
	// LastBeat and Run are the heartbeat's, when there is one.
	LastBeat time.Time
	Run      string
	// Pins are the migration runs that pinned the backup (PinBackup), sorted. A pin counts in
	// the folder's write times, not in its files and bytes.
	Pins []string
}

// folder is what a listing found of one backup.
type folder struct {
	st    Status
	files map[string]bool
	beat  storage.ObjectInfo
}

func (f *folder) add(file string, o storage.ObjectInfo) {
	if f.files == nil {
		f.files = map[string]bool{}
	}
	if run, ok := pinnedBy(file); ok {
		f.st.Pins = addPin(f.st.Pins, run)
	} else {
		f.files[file] = true
		f.st.Files++
		f.st.Bytes += o.Size
	}
	if f.st.FirstWrite.IsZero() || o.ModTime.Before(f.st.FirstWrite) {
		f.st.FirstWrite = o.ModTime
	}
	if o.ModTime.After(f.st.LastWrite) {
		f.st.LastWrite = o.ModTime
	}
	switch file {
	case ManifestFile:
		f.st.CompletedAt = o.ModTime
	case VeleroFile:
		if !f.files[ManifestFile] {
			f.st.CompletedAt = o.ModTime
		}
	case HeartbeatFile:
		f.beat = o
	}
}

// classify decides the folder's state at now, reading the heartbeat of a ferry backup without a
// manifest, and with head the start of a complete one's manifest (whose errors it returns).
func (f *folder) classify(ctx context.Context, store storage.Reader, now time.Time, head bool) (Status, error) {
	st := f.st
	st.Claimed = f.files[ClaimFile]
	fresh := false
	if !f.files[ManifestFile] && f.files[HeartbeatFile] {
		var err error
		if fresh, st.Run, err = beatFresh(ctx, store, st.Name, f.beat, now); err != nil {
			return st, fmt.Errorf("backup %s: %w", st.Name, err)
		}
		st.LastBeat = f.beat.ModTime
	}
	st.State = Classify(f.files, fresh)
	if st.State == Complete {
		if head {
			h, err := readHead(ctx, store, st.Name)
			if err != nil {
				return st, err
			}
			st.Head = h
		}
	}
	return st, nil
}

// Inspect finds one backup in storage and decides its state at now. A complete backup's
// manifest head is read and checked: one that cannot be read is an error. A name no file has is
// bad input.
func Inspect(ctx context.Context, store storage.Backend, name string, now time.Time) (Status, error) {
	if err := CheckName(name); err != nil {
		return Status{}, err
	}
	f, err := listFolder(ctx, store, name)
	if err != nil {
		return Status{}, err
	}
	if f.st.Files == 0 {
		return Status{Name: name}, badinput.Errorf("no backup named %q in %s (see ferry backups list)", name, store)
	}
	return f.classify(ctx, store, now, true)
}

func listFolder(ctx context.Context, store storage.Lister, name string) (*folder, error) {
	f := &folder{st: Status{Name: name}}
	err := store.List(ctx, Prefix(name), func(o storage.ObjectInfo) error {
		f.add(strings.TrimPrefix(o.Key, Prefix(name)), o)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list backup %s: %w", name, err)
	}
	return f, nil
}

// Scan decides the state of every backup in storage at now, by name in listing order. A backup
// whose manifest cannot be read is returned with its error in errs, by name, and not in the list.
func Scan(ctx context.Context, store storage.Backend, now time.Time) (out []Status, errs map[string]error, err error) {
	byName := map[string]*folder{}
	var order []string
	err = store.List(ctx, "backups/", func(o storage.ObjectInfo) error {
		name, file, ok := strings.Cut(strings.TrimPrefix(o.Key, "backups/"), "/")
		if !ok {
			return nil
		}
		f := byName[name]
		if f == nil {
			f = &folder{st: Status{Name: name}}
			byName[name] = f
			order = append(order, name)
		}
		f.add(file, o)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	for _, name := range order {
		st, err := byName[name].classify(ctx, store, now, true)
		if err != nil {
			if errs == nil {
				errs = map[string]error{}
			}
			errs[name] = err
			continue
		}
		out = append(out, st)
	}
	return out, errs, nil
}

// beatFresh tells whether the heartbeat storage last wrote at info.ModTime is fresh at now: at
// most StaleBeats of its writer's intervals old.
func beatFresh(ctx context.Context, store storage.Reader, name string, info storage.ObjectInfo, now time.Time) (bool, string, error) {
	interval := HeartbeatInterval
	var run string
	hb, err := readHeartbeat(ctx, store, name)
	switch {
	case err == nil:
		run = hb.Run
		if d, err := time.ParseDuration(hb.Interval); err == nil && d > 0 {
			interval = d
		}
	case errors.Is(err, storage.ErrNotExist):
		return false, "", nil // removed since the listing
	default:
		return false, "", err
	}
	return now.Sub(info.ModTime) <= StaleBeats*interval, run, nil
}

// FormatVersion is the version of the backup format this ferry writes and the newest it reads
// (docs/format.md). A change that older readers would misread raises it: 2 added keyed digests of
// Secrets, which a reader of format 1 would take for plain SHA-256 and find every Secret changed;
// 3 bucket objects' metadata, which a reader of format 2 would silently not restore; 4 volumes'
// file lists as streams of their own, which a reader of format 3 would take for empty volumes; 5
// volumes stored as trees over the chunk repository (volumes[].format), which a reader of format 4
// would take for tar streams; 6 buckets' settings, which a reader of format 5 would silently not
// restore; 7 buckets' and objects' server-side encryption, which a reader of format 6 would
// silently not restore, putting in clear what the store kept encrypted.
const FormatVersion = "7"

// checkFormat checks a manifest's formatVersion: a positive integer, at most FormatVersion.
func checkFormat(name, v string) error {
	n, ok := formatNumber(v)
	if !ok {
		return fmt.Errorf("backup %s: %s: format version %q: %w", name, ManifestFile, v, ErrBadManifest)
	}
	if want, _ := formatNumber(FormatVersion); n > want {
		return badinput.Errorf("backup %s is of format version %s; this ferry reads format version %s and older: use a newer ferry", name, v, FormatVersion)
	}
	return nil
}

func formatNumber(v string) (int, bool) {
	if v == "" || len(v) > 6 || v[0] == '0' {
		return 0, false
	}
	n := 0
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// ErrBadManifest matches the errors of a manifest that is there but cannot be read or fails
// its checks.
var ErrBadManifest = errors.New("the manifest cannot be read or fails its checks")

// ManifestHead is the start of a manifest: ferry writes formatVersion, name, schedule, source,
// startedAt and completedAt first, and the objects, which may run to megabytes, after them.
type ManifestHead struct {
	FormatVersion          string
	Name, Schedule         string
	Source                 plans.Cluster
	StartedAt, CompletedAt time.Time
}

// readHead reads a manifest only as far as its head, and checks its name and format.
func readHead(ctx context.Context, store storage.Reader, name string) (ManifestHead, error) {
	rc, err := store.Get(ctx, Prefix(name)+ManifestFile)
	if err != nil {
		return ManifestHead{}, fmt.Errorf("backup %s: %w", name, err)
	}
	defer rc.Close()
	return decodeHead(rc, name)
}

// decodeHead reads the head of backup name's manifest from r.
func decodeHead(r io.Reader, name string) (ManifestHead, error) {
	var h ManifestHead
	bad := func(err error) (ManifestHead, error) {
		return h, fmt.Errorf("backup %s: %s: %w: %v", name, ManifestFile, ErrBadManifest, err)
	}
	dec := json.NewDecoder(r)
	if tok, err := dec.Token(); err != nil {
		return bad(err)
	} else if tok != json.Delim('{') {
		return bad(errors.New("not a JSON object"))
	}
	// ferry writes these in this order, before completedAt; a manifest written otherwise is read
	// until all four are seen.
	seen := map[string]bool{}
	done := func() bool { return seen["formatVersion"] && seen["name"] && seen["startedAt"] && seen["completedAt"] }
	for !done() && dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return bad(err)
		}
		var target any
		switch tok {
		case "formatVersion":
			target = &h.FormatVersion
		case "name":
			target = &h.Name
		case "schedule":
			target = &h.Schedule
		case "source":
			target = &h.Source
		case "startedAt":
			target = &h.StartedAt
		case "completedAt":
			target = &h.CompletedAt
		default:
			target = &json.RawMessage{}
		}
		if err := dec.Decode(target); err != nil {
			return bad(err)
		}
		if key, ok := tok.(string); ok {
			seen[key] = true
		}
	}
	if !done() {
		return bad(errors.New("it lacks one of formatVersion, name, startedAt, completedAt"))
	}
	if _, ok := formatNumber(h.FormatVersion); !ok {
		return bad(fmt.Errorf("format version %q", h.FormatVersion))
	}
	if h.Name != name {
		return bad(fmt.Errorf("it names backup %q: it was copied or tampered with", h.Name))
	}
	return h, nil
}

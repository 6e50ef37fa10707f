package migrate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/internal/human"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/snapshot/kinds"
	"github.com/ferrykube/ferry/snapshot/resources"
	"github.com/ferrykube/ferry/storage"
)

// Defaults of a warm run (ferry migrate --warm).
const (
	DefaultWarmRounds     = 3
	DefaultWarmDeltaBytes = 64 << 20
)

// Round is what one pre-copy round of a warm run did: its backup of blue's volumes (incremental
// against the round before), and its restore onto green.
type Round struct {
	Round  int    `json:"round"`
	Backup string `json:"backup"`
	// Volumes, Files and Bytes are the claims backed up and the files and bytes they hold.
	Volumes int   `json:"volumes"`
	Files   int64 `json:"files"`
	Bytes   int64 `json:"bytes"`
	// ReadFiles and ReadBytes are what the round's backup read: the files changed since the
	// round before (all of them in the first round).
	ReadFiles int64 `json:"readFiles"`
	ReadBytes int64 `json:"readBytes"`
	// UploadedBytes are the bytes of new packs the round stored: what changed since the round
	// before (all of it in the first round). The rounds end once it is at most the run's delta.
	UploadedBytes int64 `json:"uploadedBytes"`
	// BucketObjects and BucketBytes are the buckets' objects the round's backup holds, and
	// BucketReadBytes what of them it read from the stores: the objects that changed since the
	// round before (all of them in the first round); it copied the others in the storage.
	BucketObjects   int   `json:"bucketObjects,omitempty"`
	BucketBytes     int64 `json:"bucketBytes,omitempty"`
	BucketReadBytes int64 `json:"bucketReadBytes,omitempty"`
	// SentBytes are the bytes of file contents the round's restore sent to green: the files that
	// changed since the round before (green holds the others), all of them in the first round.
	SentBytes      int64   `json:"sentBytes"`
	BackupSeconds  float64 `json:"backupSeconds"`
	RestoreSeconds float64 `json:"restoreSeconds"`
	// Restored counts the restore's items by status (volumes restored or unchanged, ...).
	Restored string `json:"restored,omitempty"`
	// Skipped are the items the round's backup skipped: the final backup decides on them.
	Skipped []snapshot.Skipped `json:"skipped,omitempty"`
}

// Delta is what changed since the round before: the bytes of new packs and of the bucket objects
// read. The rounds end once it is at most the run's delta.
func (rd Round) Delta() int64 { return rd.UploadedBytes + rd.BucketReadBytes }

// StageName is the name of the backup of a warm run's pre-copy round k.
func StageName(backup string, k int) string { return fmt.Sprintf("%s-stage-%d", backup, k) }

// warm is the run's pre-copy settings; nil for a run that is not warm.
func (r *Runner) warm() *Warm { return r.Journal.Run.Warm }

// stage runs a warm run's pre-copy rounds while blue is live, each a journaled step of Staged,
// until a round uploaded at most the run's delta or the rounds ran out; step 0 then ends the
// state. A round cut short is made again on resume: its backup unless complete, its restore
// always (restoring twice changes nothing).
func (r *Runner) stage(ctx context.Context) error {
	w := r.warm()
	if w == nil || r.Journal.IsDoneExactly(Staged, 0) {
		return nil
	}
	var rounds []Round
	for k := 1; k <= w.Rounds; k++ {
		if err := r.step(ctx, Staged, k, func() (any, string, error) { return r.round(ctx, k) }); err != nil {
			return err
		}
		e, _ := r.Journal.Last(Staged, Done, k)
		var rd Round
		if err := json.Unmarshal(e.Data, &rd); err != nil {
			return fmt.Errorf("run %s: the journal's round %d: %w", r.Journal.Run.ID, k, err)
		}
		rounds = append(rounds, rd)
		r.dropStages(ctx, k-1) // round k read round k-1's; round k+1 reads round k's
		if rd.Delta() <= w.DeltaBytes {
			break
		}
	}
	return r.step(ctx, Staged, 0, func() (any, string, error) {
		last := rounds[len(rounds)-1]
		why := fmt.Sprintf("its delta %s is at most %s", human.Bytes(last.Delta()), human.Bytes(w.DeltaBytes))
		if last.Delta() > w.DeltaBytes {
			why = fmt.Sprintf("the rounds ran out (%d); its delta was %s", w.Rounds, human.Bytes(last.Delta()))
		}
		return rounds, fmt.Sprintf("%d pre-copy rounds; the last, as %s: blue is quiesced next", len(rounds), why), nil
	})
}

// round k: back up blue's volumes (with the namespaces and claims green needs for them) in
// chunks, incremental against the round before, and restore them onto green, the volumes exact
// so that what blue deleted goes from green too.
func (r *Runner) round(ctx context.Context, k int) (any, string, error) {
	name := StageName(r.Journal.Run.Backup, k)
	started := time.Now()
	m, err := r.stageBackup(ctx, name)
	if err != nil {
		return nil, "", err
	}
	rd := Round{Round: k, Backup: name, Volumes: len(m.Volumes), Skipped: m.Skipped, BackupSeconds: time.Since(started).Seconds()}
	if !m.StartedAt.IsZero() && m.CompletedAt.After(m.StartedAt) {
		// The backup's own time: a resumed round may reuse the backup a killed run completed.
		rd.BackupSeconds = m.CompletedAt.Sub(m.StartedAt).Seconds()
	}
	for _, v := range m.Volumes {
		rd.Bytes += v.Bytes
		rd.UploadedBytes += v.NewPackBytes
		rd.ReadBytes += v.ReadBytes
		if v.List != nil {
			rd.Files += v.List.Files
			rd.ReadFiles += max(v.List.Files-v.UnchangedFiles, 0)
		}
	}
	for _, b := range m.Buckets {
		rd.BucketObjects += len(b.Objects)
		rd.BucketBytes += b.Bytes
		rd.BucketReadBytes += b.Bytes - b.ReusedBytes
	}
	restoring := time.Now()
	rdr, err := snapshot.Open(ctx, r.o.Store, name, r.o.Identities)
	if err != nil {
		return rd, "", err
	}
	// Green holds the round before's trees: the claims whose tree is the same are left alone, and
	// the others get only the files that changed since.
	var same map[string]bool
	base := ""
	if k > 1 {
		base = StageName(r.Journal.Run.Backup, k-1)
		if prev, err := snapshot.ReadManifest(ctx, r.o.Store, base); err == nil {
			same = sameTrees(m, prev)
		}
	}
	sub := withoutBuckets(withoutVolumes(rdr, same))
	restorers := kinds.Restorers(sub, r.o.Green, kinds.RestoreOptions{Mapping: r.o.Mapping, Existing: resources.ExistingSkip, ExactData: true,
		Parallel: r.o.Parallel, MoverImage: r.o.MoverImage, WaitTimeout: r.o.WaitTimeout, Base: base, Log: r.o.Log})
	rep, err := kinds.Run(ctx, kinds.Restore, sub, restorers, r.o.Log)
	if rep != nil {
		countUnchanged(rep, m, same)
	}
	rd.RestoreSeconds = time.Since(restoring).Seconds()
	if err != nil {
		return rd, "", fmt.Errorf("round %d: restore %s onto green: %w", k, name, refusedStops(err))
	}
	rd.Restored = countLine(rep, snapshot.StatusRestored, snapshot.StatusUnchanged, snapshot.StatusUpdated)
	rd.SentBytes = rep.Sent["volumes"]
	if failed := rep.Problems(snapshot.StatusFailed); len(failed) > 0 {
		return rd, "", fmt.Errorf("round %d: %d items failed to restore on green, e.g. %s %s: %s: %w", k, len(failed), failed[0].Kind, failed[0].Name, failed[0].Detail, ErrStopped)
	}
	if r.o.roundDone != nil {
		r.o.roundDone(&rd)
	}
	detail := fmt.Sprintf("round %d (backup %s): %d volumes, %d files, %s; read %d files, %s; uploaded %s; backup %s, restore %s",
		k, name, rd.Volumes, rd.Files, human.Bytes(rd.Bytes), rd.ReadFiles, human.Bytes(rd.ReadBytes), human.Bytes(rd.UploadedBytes), seconds(rd.BackupSeconds), seconds(rd.RestoreSeconds))
	if rd.BucketObjects > 0 {
		detail += fmt.Sprintf("; buckets: %d objects, %s, read %s", rd.BucketObjects, human.Bytes(rd.BucketBytes), human.Bytes(rd.BucketReadBytes))
	}
	if len(rd.Skipped) > 0 {
		detail += fmt.Sprintf("; %d items skipped (the final backup decides on them)", len(rd.Skipped))
	}
	return rd, detail, nil
}

// stageBackup makes a round's backup, pinned by the run, unless a killed run made it complete
// already; an incomplete one is removed and made again. Skipped items do not stop a round: the
// final backup, taken with blue quiesced, is the one the run's gate applies to.
func (r *Runner) stageBackup(ctx context.Context, name string) (*snapshot.Manifest, error) {
	if m, err := snapshot.ReadManifest(ctx, r.o.Store, name); err == nil {
		return m, r.pin(ctx, name)
	}
	if err := r.deleteBackup(ctx, name); err != nil {
		return nil, err
	}
	if err := r.pin(ctx, name); err != nil {
		return nil, err
	}
	return kinds.Backup(ctx, r.o.Store, r.o.Blue, kinds.BackupOptions{Name: name, Plan: stagePlan(r.plan), Chunks: true,
		Parallel: r.o.Parallel, MoverImage: r.o.MoverImage, Log: r.o.Log, BeforeCommit: r.holdsLease})
}

// deleteBackup deletes a backup of the run's, if it is there.
func (r *Runner) deleteBackup(ctx context.Context, name string) error {
	if _, err := snapshot.Delete(ctx, r.o.Store, name); err != nil && !errors.Is(err, storage.ErrNotExist) && !strings.Contains(err.Error(), "no backup named") {
		return err
	}
	return nil
}

// dropStages deletes the backups of the warm run's pre-copy rounds 1 to k, which no later step
// reads: a round's restore reads the round before's (its base), the restore after the quiesce the
// last round's, and nothing reads them after that. Each holds a whole copy of the buckets. A
// backup that cannot be deleted is left, with a warning, for ferry backups delete.
func (r *Runner) dropStages(ctx context.Context, k int) {
	for i := 1; i <= k; i++ {
		name := StageName(r.Journal.Run.Backup, i)
		if err := r.deleteBackup(ctx, name); err != nil {
			r.o.Log.Warn("a pre-copy round's backup could not be deleted", "backup", name, "error", err)
		}
	}
}

// stagePlan is the part of the run's plan a pre-copy round moves: the claims' files, the buckets'
// objects (into the backup only: a bucket's restore needs its server running on green, which the
// pre-copy does not start; the backup after the quiesce then copies in the storage the objects that
// did not change since the last round), and of the objects only the namespaces and claims the
// volumes' restore needs on green. The final restore finds them there, unchanged. Databases are
// left to the final backup: a dump is not read incrementally.
func stagePlan(p *plans.Plan) *plans.Plan {
	out := *p
	keep := func(group, resource string) bool {
		return group == "" && (resource == "namespaces" || resource == "persistentvolumeclaims")
	}
	out.Resources = slices.DeleteFunc(slices.Clone(p.Resources), func(res plans.Resource) bool { return !keep(res.Group, res.Resource) })
	out.Waves = nil
	for _, w := range p.Waves {
		w.Resources = slices.DeleteFunc(slices.Clone(w.Resources), func(gr string) bool { return gr != "namespaces" && gr != "persistentvolumeclaims" })
		if len(w.Resources) > 0 {
			out.Waves = append(out.Waves, w)
		}
	}
	out.Volumes = slices.DeleteFunc(slices.Clone(p.Volumes), func(v plans.Volume) bool { return v.Holds != "" })
	out.CRDs, out.Databases, out.Quiesce, out.NodePorts, out.ClusterIPs, out.Upgrade = nil, nil, nil, nil, nil, nil
	return &out
}

// The values of a warm run, as its errors name them (a command line names its flags instead).
const (
	WarmName       = "warm run"
	WarmRoundsName = "warm rounds"
	WarmDeltaName  = "warm delta"
)

// CheckWarm refuses warm settings that cannot work, as bad input naming the value: no round, a
// negative delta, an upgrade or encrypted backups. nil passes.
func CheckWarm(w *Warm, upgrade, encrypted bool) error {
	switch {
	case w == nil:
		return nil
	case w.Rounds < 1:
		return badinput.Value(WarmRoundsName, strconv.Itoa(w.Rounds), "want 1 or more")
	case w.DeltaBytes < 0:
		return badinput.Value(WarmDeltaName, strconv.FormatInt(w.DeltaBytes, 10), "want 0 or more bytes")
	case upgrade:
		// Green's release runs, its writers not yet stopped, while the rounds would write its
		// claims; and an upgrade leaves green's own copies of state as they are.
		return badinput.Value(WarmName, "", "not of an upgrade: green's release runs during the pre-copy, and ferry never writes its state; migrate the upgrade cold")
	case encrypted:
		// An encrypted backup reads every file (its previous trees are encrypted to the recipients):
		// every round would copy everything again.
		return badinput.Value(WarmName, "", "not encrypted: encrypted backups are not incremental, so no round would copy less than the one before")
	}
	return nil
}

// sameTrees names ("namespace/claim") the chunked volumes of m whose tree stream is, byte for
// byte, the one of the same claim in prev, in the same repository: nothing of them changed
// since prev, so a target that holds prev's tree need not be restored again (a restore would
// still rebuild and stream the whole volume). A different digest only costs a restore.
func sameTrees(m, prev *snapshot.Manifest) map[string]bool {
	if m == nil || prev == nil || m.Encryption != nil || prev.Encryption != nil {
		return nil
	}
	digest := func(man *snapshot.Manifest, key string) string {
		for _, s := range man.Streams {
			if s.Key == key {
				return s.SHA256
			}
		}
		return ""
	}
	out := map[string]bool{}
	for _, v := range m.Volumes {
		i := slices.IndexFunc(prev.Volumes, func(p snapshot.Volume) bool { return p.Namespace == v.Namespace && p.Name == v.Name })
		if v.Format != snapshot.FormatChunks || i < 0 {
			continue
		}
		p := prev.Volumes[i]
		if d := digest(m, v.Key); p.Format == v.Format && p.Repo == v.Repo && d != "" && d == digest(prev, p.Key) {
			out[v.Namespace+"/"+v.Name] = true
		}
	}
	return out
}

// withoutVolumes is r without the volumes named (with their streams): the restore leaves them
// as they are (countUnchanged then reports them).
func withoutVolumes(r *snapshot.Reader, names map[string]bool) *snapshot.Reader {
	if len(names) == 0 {
		return r
	}
	return without(r, "volumes", func(name string) bool { return names[name] })
}

// withoutBuckets is r without its buckets (with their streams): a round's restore leaves them to
// the restore after the quiesce, since green's store is not running yet.
func withoutBuckets(r *snapshot.Reader) *snapshot.Reader {
	if len(r.Manifest.Buckets) == 0 {
		return r
	}
	return without(r, "buckets", func(string) bool { return true })
}

// without is r without the items of kind (volumes or buckets) drop names, and their streams.
func without(r *snapshot.Reader, kind string, drop func(name string) bool) *snapshot.Reader {
	m := *r.Manifest
	switch kind {
	case "volumes":
		m.Volumes = slices.DeleteFunc(slices.Clone(m.Volumes), func(v snapshot.Volume) bool { return drop(v.Namespace + "/" + v.Name) })
	case "buckets":
		m.Buckets = slices.DeleteFunc(slices.Clone(m.Buckets), func(b snapshot.Bucket) bool { return drop(b.Name) })
	}
	m.Streams = slices.DeleteFunc(slices.Clone(m.Streams), func(s snapshot.Stream) bool {
		k, name := r.Manifest.ItemOf(s.Key)
		return k == kind && drop(name)
	})
	out := *r
	out.Manifest = &m
	return &out
}

// countUnchanged counts the entries of the volumes of m named unchanged in rep, as a restore
// counts a volume's entries it found right.
func countUnchanged(rep *snapshot.Report, m *snapshot.Manifest, names map[string]bool) {
	for _, v := range m.Volumes {
		if names[v.Namespace+"/"+v.Name] {
			n := 1
			if v.List != nil {
				n = int(v.List.Entries)
			}
			rep.CountN("volumes", snapshot.StatusUnchanged, n)
		}
	}
}

// lastRound is the manifest of a warm run's last pre-copy round, if the rounds are over and it
// can be read.
func (r *Runner) lastRound(ctx context.Context) *snapshot.Manifest {
	e, ok := r.Journal.Last(Staged, Done, 0)
	if !ok || e.Step != 0 {
		return nil
	}
	var rounds []Round
	if json.Unmarshal(e.Data, &rounds) != nil || len(rounds) == 0 {
		return nil
	}
	m, err := snapshot.ReadManifest(ctx, r.o.Store, rounds[len(rounds)-1].Backup)
	if err != nil {
		return nil
	}
	return m
}

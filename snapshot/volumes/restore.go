package volumes

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ferrykube/ferry/internal/kube"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/plans/rules"
	"github.com/ferrykube/ferry/snapshot"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/utils/ptr"
)

// Contents is a whole kind of data: it captures, restores and verifies.
var _ snapshot.Kind = Contents{}

// FillsClaims implements snapshot.ClaimFiller: a volume's restore needs its claim, not the
// workloads that mount it (those wait for it).
func (Contents) FillsClaims() {}

// Restore implements snapshot.Restorer: for every volume of the backup, a mover pod mounts the
// claim on the target (restored before by the objects, in the mapped namespace) read-write, and
// ferry streams the stored archive, decrypted, into `ferry mover unpack --stage`, which stages it
// on the claim without changing anything else (see Stage). Only once the stored stream's size and
// SHA-256 and every staged entry (name, type, size, mode, SHA-256, link, hard link) match the
// manifest does `ferry mover unpack --apply` put it in place; otherwise `--abort` removes what
// was staged, and the claim is as it was. What the mover reports it applied is checked against
// the manifest file by file. Files are counted one by one as restored, updated (metadata only) or unchanged; a file
// that does not match is failed, named "namespace/claim:path"; a volume that could not be
// restored at all is failed, named "namespace/claim". Files on the target that the backup lacks
// are left alone (unless Exact), and so are the files the backup left out (skipped items).
//
// A stored stream that does not match the manifest (truncated, tampered with) fails its volume
// and is also returned, joined with the others, as an error matching what the reader said (for a
// plain backup, snapshot.ErrCorrupt): the backup itself is bad.
func (c Contents) Restore(ctx context.Context, r *snapshot.Reader, report *snapshot.Report) error {
	c = c.withDefaults()
	for _, s := range r.Manifest.Skipped {
		if s.Kind == "volume" || s.Kind == SkippedFileKind {
			ns, claim, _ := strings.Cut(s.Name, "/")
			report.Add(kindName, snapshot.StatusSkipped, c.Mapping.Namespace(ns)+"/"+claim, "not in the backup: "+s.Reason)
		}
	}
	if c.Direct != nil && slices.ContainsFunc(r.Manifest.Volumes, func(v snapshot.Volume) bool { return strings.HasSuffix(v.Key, snapshot.EncryptedSuffix) }) {
		c.Log.Info("the backup is encrypted: ferry decrypts its volumes and streams them to the mover pods through the API server; movers never get the age identity")
	}
	if c.Base != "" {
		m, err := snapshot.ReadManifest(ctx, r.Store(), c.Base)
		switch {
		case err != nil:
			c.Log.Warn("the backup a restore before left the claims as cannot be read: sending every file", "restoreBefore", c.Base, "error", err)
		case m.Encryption != nil:
			c.Log.Warn("the backup a restore before left the claims as is encrypted, its trees unread without the identity: sending every file", "restoreBefore", c.Base)
		default:
			c.base = m
		}
	}
	return c.eachVolume(ctx, r, func(ctx context.Context, v snapshot.Volume) error {
		return c.restoreVolume(ctx, r, report, v)
	})
}

// baseTree is the tree of v's claim in Base, when both are chunked in the same repository and
// unencrypted (ferry reads a base tree without the identity); nil otherwise.
func (c Contents) baseTree(r *snapshot.Reader, v snapshot.Volume) *prevTree {
	if c.base == nil || r.Manifest.Encryption != nil || v.Format != snapshot.FormatChunks {
		return nil
	}
	i := slices.IndexFunc(c.base.Volumes, func(b snapshot.Volume) bool {
		return b.Namespace == v.Namespace && b.Name == v.Name && b.Format == snapshot.FormatChunks && b.Repo == v.Repo
	})
	if i < 0 {
		return nil
	}
	return &prevTree{store: r.Store(), backup: c.Base, volume: c.base.Volumes[i]}
}

func (c Contents) withDefaults() Contents {
	if c.Parallel <= 0 {
		c.Parallel = 4
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.movers == nil {
		c.movers = newMoverSet()
	}
	return c
}

// eachVolume runs fn for every volume of the backup, c.Parallel at a time. One volume's failure
// does not stop the others; the errors fn returns are joined, with ctx's if it ended.
func (c Contents) eachVolume(ctx context.Context, r *snapshot.Reader, fn func(context.Context, snapshot.Volume) error) error {
	var g errgroup.Group
	g.SetLimit(c.Parallel)
	var mu sync.Mutex
	var errs []error
	for _, v := range r.Manifest.Volumes {
		if ctx.Err() != nil {
			break
		}
		g.Go(func() error {
			if err := fn(ctx, v); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("volume %s/%s: %w", c.Mapping.Namespace(v.Namespace), v.Name, err))
				mu.Unlock()
			}
			return nil
		})
	}
	g.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.Join(errs...)
}

// restoreVolume reports what happened to the volume; it returns only errors of the backup's
// stream.
func (c Contents) restoreVolume(ctx context.Context, r *snapshot.Reader, report *snapshot.Report, v snapshot.Volume) error {
	ns := c.Mapping.Namespace(v.Namespace)
	name := ns + "/" + v.Name
	target, err := c.liveVolume(ctx, ns, v.Name)
	if err != nil {
		if apierrors.IsNotFound(err) {
			report.Add(kindName, snapshot.StatusFailed, name, "the claim does not exist on the target: restore the backup's objects first")
		} else {
			report.Add(kindName, snapshot.StatusFailed, name, err.Error())
		}
		return nil
	}
	spec, err := c.targetMover(ctx, target, roleRestore)
	if err != nil {
		report.Add(kindName, snapshot.StatusFailed, name, err.Error())
		return nil
	}
	if target.Phase != string(corev1.ClaimBound) && target.VolumeName == "" && spec.Spec.NodeName == "" {
		c.placeAsWorkload(ctx, spec, v, target.StorageClass)
	}
	pod, stop, err := c.startMover(ctx, spec)
	if err != nil {
		report.Add(kindName, snapshot.StatusFailed, name, err.Error())
		return nil
	}
	defer stop()
	ctx, unwatch := whileMoverLives(ctx, c.Client, ns, pod)
	defer unwatch()
	start := time.Now()
	stage := c.stage
	switch {
	case c.Direct == nil:
	case strings.HasSuffix(v.Key, snapshot.EncryptedSuffix): // Restore said so once
	case v.Format != "":
		c.Log.Info("restoring through exec: direct movers read tar streams", "claim", name, "format", v.Format)
	default:
		stage = c.stageDirect
	}
	backup := volumeFiles(ctx, r, v)
	base := c.baseTree(r, v)
	var staged Staged
	var sent int64
	var streamErr error
	var res UnpackResult
	var restored *snapshot.Report
	var listErr error
	for round := 1; ; round++ {
		for attempt := 1; ; attempt++ {
			staged, sent, streamErr, err = stage(ctx, r, v, ns, pod, backup, base)
			if streamErr != nil || err == nil || ctx.Err() != nil {
				break
			}
			if base != nil && !kube.ConnectionBroke(err) {
				// The claim is not as the base's restore left it (ErrKeptChanged), or the mover
				// cannot take kept entries (an older image): it gets every file, on a try of its own.
				c.Log.Warn("the mover refused the files kept since the restore before: sending every file", "claim", name, "restoreBefore", c.Base, "error", err)
				base = nil
				attempt--
			} else if kube.ConnectionBroke(err) && attempt < kube.StreamAttempts {
				// Nothing is applied before the stage is done: stage it again.
				c.Log.Warn("the volume's stream ended early; staging it again", "claim", name, "attempt", attempt, "error", err)
			} else {
				break // the mover failed
			}
			if aerr := c.abort(ctx, ns, pod, staged); aerr != nil {
				report.Add(kindName, snapshot.StatusFailed, name, "what was staged could not be removed (the next restore does): "+aerr.Error())
				return nil
			}
		}
		if streamErr != nil || err != nil {
			if aerr := c.abort(ctx, ns, pod, staged); aerr != nil {
				report.Add(kindName, snapshot.StatusFailed, name, "what was staged could not be removed (the next restore does): "+aerr.Error())
			}
		}
		if streamErr != nil {
			report.Add(kindName, snapshot.StatusFailed, name, streamErr.Error()+"; the claim was left as it was")
			return streamErr
		}
		if err != nil {
			report.Add(kindName, snapshot.StatusFailed, name, moverFailed(ctx, c.Client, ns, pod, err).Error()+"; the claim was left as it was")
			return nil
		}
		staged.Xattrs = v.Xattrs
		res, restored, listErr, err = c.apply(ctx, ns, pod, name, staged, backup)
		if err == nil && listErr == nil {
			checkRestoredRoot(restored, name, v.Root, res.Root)
		}
		if err != nil && listErr == nil && kube.ConnectionBroke(err) && round < kube.StreamAttempts && ctx.Err() == nil {
			// An apply cut short may have put part of the volume in place, or all of it and
			// removed what it staged: staged again, the volume gets what it still lacks (what is
			// already as the backup holds it is not touched).
			c.Log.Warn("the volume's apply was cut short; staging and applying it again", "claim", name, "attempt", round, "error", err)
			continue
		}
		break
	}
	if listErr != nil {
		report.Add(kindName, snapshot.StatusFailed, name, "restored, but not checked: the backup's file list: "+listErr.Error())
		return listErr
	}
	if err != nil {
		report.Add(kindName, snapshot.StatusFailed, name, moverFailed(ctx, c.Client, ns, pod, err).Error())
		return nil
	}
	report.Merge(restored)
	report.AddSent(kindName, sent)
	c.Log.Info("volume restored", "claim", name, "written", res.Written, "updated", res.Updated, "unchanged", res.Unchanged,
		"bytes", res.Bytes, "sent", sent, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// checkRestored compares what the mover says it applied, read an entry at a time by next in
// the order of a walk, with the backup's files, and counts each file into report. It returns an
// error of the backup's file list, or (matching errTargetListing) of the mover's.
func checkRestored(report *snapshot.Report, name string, backup files, res UnpackResult, next func() (UnpackedFile, bool, error)) error {
	action := ""
	applied := func() (snapshot.File, bool, error) {
		f, ok, err := next()
		action = f.Action
		return f.File, ok, err
	}
	err := joinWalks(backup, applied, func(want, got *snapshot.File) {
		switch {
		case want == nil:
			// The stored archive held an entry its manifest does not list: it was not written by
			// this backup, or not only.
			report.Add(kindName, snapshot.StatusFailed, name+":"+got.Path, "written from the stored archive, but not in the backup's manifest")
		case got == nil:
			report.Add(kindName, snapshot.StatusFailed, name+":"+want.Path, "restored, but not on the target")
		default:
			if detail := fileDifference(*want, *got); detail != "" {
				report.Add(kindName, snapshot.StatusFailed, name+":"+want.Path, "restored, but "+detail)
				return
			}
			switch action {
			case ActionWritten:
				report.Count(kindName, snapshot.StatusRestored)
			case ActionUpdated:
				report.Count(kindName, snapshot.StatusUpdated)
			default:
				report.Count(kindName, snapshot.StatusUnchanged)
			}
		}
	})
	if err != nil {
		return err
	}
	for _, p := range res.Deleted {
		report.Add(kindName, snapshot.StatusDeleted, name+":"+p, "not in the backup")
	}
	for _, note := range res.Notes {
		report.Add(kindName, snapshot.StatusSkipped, name, note)
	}
	return nil
}

// SkippedFileKind is the kind of a manifest's skipped item that is one file of a volume, named
// "namespace/claim:path": Pack left it out as it changed while read, twice.
const SkippedFileKind = "file"

// checkRestoredRoot lists in report a volume's root folder that the mover applied (got; nil
// where it could not, which its notes say) otherwise than the backup holds it (want; nil in a
// backup before it was stored).
func checkRestoredRoot(report *snapshot.Report, name string, want, got *snapshot.File) {
	if want == nil || got == nil {
		return
	}
	if detail := fileDifference(*want, *got); detail != "" {
		report.Add(kindName, snapshot.StatusFailed, name+":"+RootPath, "restored, but "+detail)
	}
}

// checkStaged compares what the mover staged, read an entry at a time by next, with the backup's
// files: any difference, an entry the backup lacks or entries out of the order in which a backup
// writes them mean the stored archive is not the one the backup wrote. An error of the file list
// (it does not match the manifest) is returned as it is, and one of the mover's output (matching
// errMoverOutput) too.
func checkStaged(file string, backup files, next func() (snapshot.File, bool, error)) error {
	diffs, _, err := compareWalks(backup, next, true)
	switch {
	case errors.Is(err, errMoverOutput):
		return err
	case errors.Is(err, errTargetListing):
		return fmt.Errorf("%s: %v: %w", file, strings.Replace(err.Error(), errTargetListing.Error(), "the stored archive", 1), snapshot.ErrCorrupt)
	case err != nil:
		return err
	case len(diffs) == 0:
		return nil
	}
	d := diffs[0]
	detail := strings.NewReplacer("backup", "manifest", "target", "archive").Replace(d.detail)
	switch {
	case d.status == snapshot.StatusMissing:
		detail = "not in the stored archive"
	case d.detail == "not in the backup":
		detail = "in the stored archive, not in the manifest"
	}
	return fmt.Errorf("%s: %d entries of the stored archive differ from the manifest (%s: %s): %w", file, len(diffs), d.path, detail, snapshot.ErrCorrupt)
}

// readStaged reads what `ferry mover unpack --stage` prints as it prints it: head, which holds
// st, then st's entries (see readStagedLines).
func readStaged(out io.Reader, head any, st *Staged, file string, backup files) error {
	lines, err := newLineReader[StagedFile](out, head, func() int { return st.Count })
	if err != nil {
		return err
	}
	return readStagedLines(lines, st, file, backup)
}

// readStagedLines reads st's entries, checks them (checkStaged), and records their SHA-256 in
// st, and their lines when the mover did not save them.
func readStagedLines(lines *lineReader[StagedFile], st *Staged, file string, backup files) error {
	if !st.Saved {
		if st.Count > InlineStaged {
			return fmt.Errorf("%w: %d entries not saved, at most %d may be", errMoverOutput, st.Count, InlineStaged)
		}
		lines.keep = &st.lines
	}
	if err := checkStaged(file, backup, lines.files(StagedFile.file)); err != nil {
		return err
	}
	st.ListSHA256 = lines.sum()
	return nil
}

// stage streams the volume's stored archive into `ferry mover unpack --stage` in the pod; a
// chunked one with base (see openTree) sends only the files that differ from it. sent is the
// bytes of file contents the archive held. streamErr is an error of the backup's stream (it does
// not match the manifest, or cannot be decrypted); err one of the mover.
func (c Contents) stage(ctx context.Context, r *snapshot.Reader, v snapshot.Volume, ns, pod string, backup files, base *prevTree) (st Staged, sent int64, streamErr, err error) {
	var rc io.ReadCloser
	var tree *treeStream
	sent = v.Bytes
	if v.Format == snapshot.FormatChunks {
		tree, err = openTree(ctx, r, v, base)
		rc = tree
	} else {
		rc, err = r.Open(ctx, v.Key)
	}
	if err != nil {
		return st, sent, err, nil
	}
	if tree != nil {
		defer func() { sent = tree.Sent() }()
	}
	// kwok, and a kubelet that is slow to notice, may never end the command's stdin: a stream
	// that breaks off must end the exec itself, or the mover would wait for the rest forever.
	execCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	in := kube.NewStdin(rc, cancel)
	var stderr bytes.Buffer
	checkErr, err := c.execReading(execCtx, kube.ExecRequest{Namespace: ns, Pod: pod, Container: "mover",
		Command: []string{"ferry", "mover", "unpack", "--stage"}, Stdin: in, Stderr: &stderr},
		func(out io.Reader) error { return readStaged(out, &st, &st, r.Name()+"/"+v.Key, backup) })
	if serr := in.Stop(); serr != nil {
		rc.Close()
		return st, sent, serr, nil
	}
	if err != nil && tree != nil && tree.Err() != nil {
		// The archive ended with the block the mover fails on: it removed what it staged.
		return st, sent, tree.Close(), nil
	}
	if checkErr != nil && !errors.Is(checkErr, errMoverOutput) {
		// What was staged is not what the backup holds (the mover printed it whole, then was
		// stopped): the whole stream's check, on Close, says whether it is the stream.
		if cerr := rc.Close(); cerr != nil {
			return st, sent, cerr, nil
		}
		return st, sent, checkErr, nil
	}
	if err == nil && checkErr != nil {
		err = fmt.Errorf("unreadable result: %w", checkErr)
	}
	if err != nil {
		err = fmt.Errorf("ferry mover unpack --stage: %w%s", err, moverStderr(stderr.String()))
		// Was it the stream the mover could not read? Reading on to its end tells, within reason.
		if in.Sent() == 0 {
			rc.Close()
			return st, sent, nil, err // it never got that far
		}
		if _, derr := io.Copy(io.Discard, io.LimitReader(rc, failedDrainLimit)); derr != nil {
			rc.Close()
			return st, sent, fmt.Errorf("%w (and %v)", derr, err), nil
		}
		rc.Close()
		return st, sent, nil, err
	}
	// The mover stops at the archive's end marker; Close reads the few bytes after it and checks
	// the whole stream against the manifest.
	if cerr := rc.Close(); cerr != nil {
		return st, sent, cerr, nil
	}
	return st, sent, nil, nil
}

// apply has the mover put what it staged in place (`ferry mover unpack --apply`), handing back
// the summary of the staged list ferry checked (and its lines, if the mover did not save them),
// and checks what the mover says it applied
// against the backup's files as it prints it (checkRestored), counting each file into restored.
// listErr is an error of the backup's file list; err one of the mover.
func (c Contents) apply(ctx context.Context, ns, pod, name string, st Staged, backup files) (res UnpackResult, restored *snapshot.Report, listErr, err error) {
	line, err := json.Marshal(st)
	if err != nil {
		return res, nil, nil, err
	}
	cmd := []string{"ferry", "mover", "unpack", "--apply"}
	if c.Exact {
		cmd = append(cmd, "--delete")
	}
	restored = &snapshot.Report{}
	var stderr bytes.Buffer
	stdin := io.MultiReader(bytes.NewReader(append(line, '\n')), bytes.NewReader(st.lines))
	readErr, err := c.execReading(ctx, kube.ExecRequest{Namespace: ns, Pod: pod, Container: "mover",
		Command: cmd, Stdin: stdin, Stderr: &stderr},
		func(out io.Reader) error {
			lines, err := newLineReader[UnpackedFile](out, &res, func() int { return res.Count })
			if err != nil {
				return err
			}
			return checkRestored(restored, name, backup, res, lines.next)
		})
	switch {
	case readErr != nil && !errors.Is(readErr, errTargetListing) && !errors.Is(readErr, errMoverOutput):
		return res, nil, readErr, nil // the mover printed only once it was done
	case err != nil:
		return res, nil, nil, fmt.Errorf("ferry mover unpack --apply: %w%s", err, moverStderr(stderr.String()))
	case readErr != nil:
		return res, nil, nil, fmt.Errorf("ferry mover unpack --apply: unreadable result: %w", readErr)
	}
	return res, restored, nil, nil
}

// abort has the mover remove what it staged (`ferry mover unpack --abort`), if it staged anything.
func (c Contents) abort(ctx context.Context, ns, pod string, st Staged) error {
	if st.RootModTime.IsZero() {
		return nil
	}
	line, err := json.Marshal(Staged{ID: st.ID, RootModTime: st.RootModTime})
	if err != nil {
		return err
	}
	var stdout, stderr bytes.Buffer
	// Also after ctx ended: what was staged is not left for the next restore when it need not be.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	err = c.exec(actx, kube.ExecRequest{Namespace: ns, Pod: pod, Container: "mover",
		Command: []string{"ferry", "mover", "unpack", "--abort"}, Stdin: bytes.NewReader(append(line, '\n')), Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		return fmt.Errorf("ferry mover unpack --abort: %w%s", err, moverStderr(stderr.String()))
	}
	return nil
}

// stageDirect has the mover read the volume's stored archive from storage itself, through a
// presigned GET, and stage it, and checks what it read against the manifest. Encrypted archives
// go through stage: a mover never gets an age identity.
func (c Contents) stageDirect(ctx context.Context, r *snapshot.Reader, v snapshot.Volume, ns, pod string, backup files, _ *prevTree) (res Staged, sent int64, streamErr, err error) {
	sent = v.Bytes
	want, ok := r.Stream(v.Key)
	if !ok {
		return res, sent, fmt.Errorf("backup %s: %s: %w (not recorded)", r.Name(), v.Key, snapshot.ErrCorrupt), nil
	}
	req, err := directUnpackRequest(ctx, c.Direct, r.StorageKey(v.Key))
	if err != nil {
		return res, sent, nil, err
	}
	line, err := json.Marshal(req)
	if err != nil {
		return res, sent, nil, err
	}
	file := r.Name() + "/" + v.Key
	var direct DirectUnpackResult
	storedErr := func() error {
		switch {
		case direct.Stored.Bytes != want.Bytes:
			return fmt.Errorf("%s: %d bytes stored, the manifest says %d (truncated or replaced): %w", file, direct.Stored.Bytes, want.Bytes, snapshot.ErrCorrupt)
		case direct.Stored.SHA256 != want.SHA256:
			return fmt.Errorf("%s: SHA-256 %s, the manifest says %s (tampered with): %w", file, direct.Stored.SHA256, want.SHA256, snapshot.ErrCorrupt)
		}
		return nil
	}
	var stderr bytes.Buffer
	readErr, err := c.execReading(ctx, kube.ExecRequest{Namespace: ns, Pod: pod, Container: "mover",
		Command: []string{"ferry", "mover", "unpack", "--stage", "--direct"}, Stdin: bytes.NewReader(append(line, '\n')), Stderr: &stderr},
		func(out io.Reader) error {
			lines, err := newLineReader[StagedFile](out, &direct, func() int { return direct.Count })
			if err != nil || direct.Error != "" || storedErr() != nil {
				return err // a failed stage staged nothing; a bad stream explains it
			}
			return readStagedLines(lines, &direct.Staged, file, backup)
		})
	res = direct.Staged
	if errors.Is(readErr, errMoverOutput) && direct.Stored.SHA256 == "" {
		if err != nil {
			return res, sent, nil, fmt.Errorf("ferry mover unpack --stage --direct: %w%s", err, moverStderr(stderr.String()))
		}
		return res, sent, nil, fmt.Errorf("ferry mover unpack --stage --direct: unreadable result: %w", readErr)
	}
	// The stream first: a bad backup explains a failed stage. What was staged is aborted then.
	if serr := storedErr(); serr != nil {
		return res, sent, serr, nil
	}
	switch {
	case direct.Error != "":
		return res, sent, nil, fmt.Errorf("ferry mover unpack --stage --direct: %s", direct.Error)
	case readErr != nil && !errors.Is(readErr, errMoverOutput):
		return res, sent, readErr, nil
	case err != nil:
		return res, sent, nil, fmt.Errorf("ferry mover unpack --stage --direct: %w%s", err, moverStderr(stderr.String()))
	case readErr != nil:
		return res, sent, nil, fmt.Errorf("ferry mover unpack --stage --direct: unreadable result: %w", readErr)
	}
	return res, sent, nil, nil
}

// failedDrainLimit is how much of a stream ferry reads on after a mover failed, to tell a bad
// backup from a failing target.
const failedDrainLimit = 256 << 20

// heldByOnePod says why no mover may mount the claim now, or "": it is ReadWriteOncePod and a pod
// mounts it. Only one pod at a time may; a mover pinned to that pod's node would be a second one,
// against the claim's promise to its pod, or never start.
func heldByOnePod(v plans.Volume) string {
	if !slices.Contains(v.AccessModes, "ReadWriteOncePod") || len(v.Pods) == 0 {
		return ""
	}
	return fmt.Sprintf("a ReadWriteOncePod claim in use by pod %s: no second pod may mount it; its files move once the pod is stopped", v.Pods[0].Name)
}

// Roles of mover pods on a target.
const (
	roleRestore = "restore"
	roleVerify  = "verify"
	// RoleLabel says what a mover pod on a restore's target does: restore (it writes the claim) or
	// verify (it reads it). Backup movers have none.
	RoleLabel = "ferry.dev/role"
)

// liveVolume describes the claim as it is now on the cluster c.Client reaches (a restore's
// target, a backup's source), for a mover pod: its access modes, and the nodes of the pods that
// use it (a ReadWriteOnce claim in use is pinned to its node).
func (c Contents) liveVolume(ctx context.Context, ns, claim string) (plans.Volume, error) {
	pvc, err := c.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		return plans.Volume{}, fmt.Errorf("claim %s/%s: %w", ns, claim, err)
	}
	v := plans.Volume{Namespace: ns, Name: claim, Phase: string(pvc.Status.Phase), VolumeName: pvc.Spec.VolumeName, StorageClass: ptr.Deref(pvc.Spec.StorageClassName, "")}
	for _, m := range pvc.Spec.AccessModes {
		v.AccessModes = append(v.AccessModes, string(m))
	}
	pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return v, fmt.Errorf("pods in %s: %w", ns, err)
	}
	for _, p := range pods.Items {
		if p.Labels[MoverLabel] == rules.MoverName || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, vol := range p.Spec.Volumes {
			if vol.PersistentVolumeClaim != nil && vol.PersistentVolumeClaim.ClaimName == claim {
				v.Pods = append(v.Pods, plans.PodUse{Name: p.Name, Node: p.Spec.NodeName})
			}
		}
	}
	return v, nil
}

// targetMover is the mover pod for a claim on a restore's target. A restore mover mounts the
// claim read-write and, as root, may also set owners, modes and times of files it did not create
// (CHOWN, FOWNER, FSETID: all within the baseline pod security level).
func (c Contents) targetMover(ctx context.Context, v plans.Volume, role string) (*corev1.Pod, error) {
	if why := heldByOnePod(v); why != "" {
		return nil, errors.New(why)
	}
	restricted, err := c.restricted(ctx, v.Namespace)
	if err != nil {
		return nil, err
	}
	spec := c.moverPod(v, restricted)
	spec.Labels[RoleLabel] = role
	if role == roleRestore {
		spec.Spec.Containers[0].VolumeMounts[0].ReadOnly = false
		spec.Spec.Volumes[0].PersistentVolumeClaim.ReadOnly = false
		if sc := spec.Spec.Containers[0].SecurityContext; !restricted {
			sc.Capabilities.Add = append(sc.Capabilities.Add, "CHOWN", "FOWNER", "FSETID")
		}
	}
	return spec, nil
}

// placeAsWorkload places the restore mover spec of claim v, which the target has not bound yet,
// as the pods that used the claim on the source were placed (their node selector, required node
// affinity and tolerations, as the backup's plan recorded them) when the claim's class makes its
// volume where its first pod runs (WaitForFirstConsumer): the mover is that pod, and a volume
// made where it runs (a zonal disk) would keep the workload off its own nodes. A placement that
// no schedulable node of the target matches is left out, saying so: the workload cannot run
// there either.
func (c Contents) placeAsWorkload(ctx context.Context, spec *corev1.Pod, v snapshot.Volume, class string) {
	p := sourcePlacement(c.Plan, v)
	if p == nil || class == "" {
		return
	}
	claim := spec.Namespace + "/" + v.Name
	sc, err := c.Client.StorageV1().StorageClasses().Get(ctx, class, metav1.GetOptions{})
	if err != nil {
		c.Log.Warn("the claim's storage class cannot be read: its mover is not placed as its workload's pods", "claim", claim, "class", class, "error", err)
		return
	}
	if sc.VolumeBindingMode == nil || *sc.VolumeBindingMode != storagev1.VolumeBindingWaitForFirstConsumer {
		return // the volume is made wherever its class says, whoever mounts it first
	}
	placed := spec.DeepCopy()
	if len(p.NodeSelector) > 0 { // DeepCopy copied the map
		if placed.Spec.NodeSelector == nil {
			placed.Spec.NodeSelector = map[string]string{}
		}
		maps.Copy(placed.Spec.NodeSelector, p.NodeSelector)
	}
	if p.NodeAffinity != nil {
		placed.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: p.NodeAffinity}}
	}
	placed.Spec.Tolerations = append(placed.Spec.Tolerations, p.Tolerations...)
	nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		c.Log.Warn("the target's nodes cannot be listed: the claim's mover is not placed as its workload's pods", "claim", claim, "error", err)
		return
	}
	affinity := nodeaffinity.GetRequiredNodeAffinity(placed)
	for i := range nodes.Items {
		if ok, err := affinity.Match(&nodes.Items[i]); ok && err == nil && !nodes.Items[i].Spec.Unschedulable {
			*spec = *placed
			return
		}
	}
	c.Log.Warn("no schedulable node of the target is like those the claim's pods ran on (their node selector and required affinity, with the mover section's): its mover runs on any, and its workload may not run",
		"claim", claim)
}

// sourcePlacement is the placement of a pod that used claim v on the source, as the plan
// recorded it: of one that wrote to it and had a node, if any did.
func sourcePlacement(plan *plans.Plan, v snapshot.Volume) *plans.NodePlacement {
	if plan == nil {
		return nil
	}
	var best *plans.NodePlacement
	bestScore := -1
	for _, pv := range plan.Volumes {
		if pv.Namespace != v.Namespace || pv.Name != v.Name {
			continue
		}
		for _, use := range pv.Pods {
			score := 0
			if use.Node != "" {
				score += 2
			}
			if !use.ReadOnly {
				score++
			}
			if use.Placement != nil && score > bestScore {
				best, bestScore = use.Placement, score
			}
		}
	}
	return best
}

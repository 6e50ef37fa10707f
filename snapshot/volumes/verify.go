package volumes

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/ferrykube/ferry/internal/kube"
	"github.com/ferrykube/ferry/snapshot"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// ListResult is what `ferry mover pack --list` prints, as one JSON line.
type ListResult = Listing

// List lists dir's tree as a backup's manifest lists a volume, with every file's SHA-256, without
// sending contents anywhere. It is Pack read by Index, so both list alike by construction.
func List(dir string) (Listing, error) {
	out, in := io.Pipe()
	go func() { in.CloseWithError(Pack(dir, in)) }()
	listing, err := Index(out)
	out.CloseWithError(err)
	return listing, err
}

// Verify implements snapshot.Restorer: for every volume of the backup, a mover pod mounts the
// claim on the target read-only and lists its tree with every file's SHA-256; each file of the
// manifest must be there, under the same name byte for byte, with the same type, size, mode,
// SHA-256, symlink target and hard link (the same file as the entry it names), and nothing else
// may be. Files are counted identical one by one; differences are named
// "namespace/claim:path". Owners and times are not compared: a restore without root cannot set
// owners, and times say nothing of the data.
func (c Contents) Verify(ctx context.Context, r *snapshot.Reader, report *snapshot.Report) error {
	c = c.withDefaults()
	// Files the backup left out are on the target as they are: not differences.
	left := map[string]string{}
	for _, s := range r.Manifest.Skipped {
		if s.Kind == SkippedFileKind {
			left[s.Name] = s.Reason
		}
	}
	return c.eachVolume(ctx, r, func(ctx context.Context, v snapshot.Volume) error {
		c.verifyVolume(ctx, r, report, v, left)
		return nil
	})
}

func (c Contents) verifyVolume(ctx context.Context, r *snapshot.Reader, report *snapshot.Report, v snapshot.Volume, left map[string]string) {
	ns := c.Mapping.Namespace(v.Namespace)
	name := ns + "/" + v.Name
	target, err := c.targetVolume(ctx, ns, v.Name)
	if apierrors.IsNotFound(err) {
		report.Add(kindName, snapshot.StatusMissing, name, "the claim does not exist on the target")
		return
	}
	if err != nil {
		report.Add(kindName, snapshot.StatusFailed, name, "could not verify: "+err.Error())
		return
	}
	spec, err := c.targetMover(ctx, target, roleVerify)
	if err != nil {
		report.Add(kindName, snapshot.StatusFailed, name, "could not verify: "+err.Error())
		return
	}
	pod, stop, err := c.startMover(ctx, spec)
	if err != nil {
		report.Add(kindName, snapshot.StatusFailed, name, "could not verify: "+err.Error())
		return
	}
	defer stop()
	ctx, unwatch := whileMoverLives(ctx, c.Client, ns, pod)
	defer unwatch()
	var stdout, stderr bytes.Buffer
	err = c.exec(ctx, kube.ExecRequest{Namespace: ns, Pod: pod, Container: "mover",
		Command: []string{"ferry", "mover", "pack", "--list"}, Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		err = moverFailed(ctx, c.Client, ns, pod, fmt.Errorf("ferry mover pack --list: %w%s", err, moverStderr(stderr.String())))
		report.Add(kindName, snapshot.StatusFailed, name, "could not verify: "+err.Error())
		return
	}
	var listed ListResult
	if err := json.Unmarshal(stdout.Bytes(), &listed); err != nil {
		report.Add(kindName, snapshot.StatusFailed, name, "could not verify: ferry mover pack --list: unreadable result: "+err.Error())
		return
	}
	diffs, identical, err := compareFiles(volumeFiles(ctx, r, v), listed.Files, true)
	if err != nil {
		report.Add(kindName, snapshot.StatusFailed, name, "could not verify: the backup's file list: "+err.Error())
		return
	}
	report.CountN(kindName, snapshot.StatusIdentical, identical)
	unsteady := map[string]string{}
	for _, s := range listed.Skipped {
		unsteady[s.Path] = s.Reason
	}
	for _, d := range diffs {
		if reason, ok := left[v.Namespace+"/"+v.Name+":"+d.path]; ok {
			d.status, d.detail = snapshot.StatusSkipped, "not in the backup: "+reason
		}
		if reason, ok := unsteady[d.path]; ok {
			d.status, d.detail = snapshot.StatusFailed, "could not verify: "+reason
		}
		report.Add(kindName, d.status, name+":"+d.path, d.detail)
	}
	c.Log.Info("volume verified", "claim", name, "identical", identical, "differences", len(diffs))
}

// kindName is the kind of data in reports.
const kindName = "volumes"

// fileDiff is a file that is not on the target as the backup holds it.
type fileDiff struct {
	path, status, detail string
}

// files hands each of a volume's files in the backup to fn, in the order stored, and returns an
// error of its own or fn's: snapshot.Reader.VolumeFiles, or a manifest's list in tests.
type files func(fn func(snapshot.File) error) error

// volumeFiles reads the volume's files from the backup, checked (see Reader.VolumeFiles).
func volumeFiles(ctx context.Context, r *snapshot.Reader, v snapshot.Volume) files {
	return func(fn func(snapshot.File) error) error { return r.VolumeFiles(ctx, v, fn) }
}

// inline hands out a list held in memory.
func inline(list []snapshot.File) files {
	return func(fn func(snapshot.File) error) error {
		for _, f := range list {
			if err := fn(f); err != nil {
				return err
			}
		}
		return nil
	}
}

// compareFiles compares a volume's files in the backup with those listed on the target: by type,
// and by size, mode, SHA-256 and hard link (files), mode (directories, FIFOs) or target
// (symlinks). With extras, files on the target that the backup lacks are differences too (a
// top-level lost+found excepted: the filesystem makes it). It returns the differences, in the
// backup's order, and how many files were identical. The backup's list is read as a stream,
// never held: only the target's is, which the mover handed over whole. An error of the backup's
// list makes the comparison void.
func compareFiles(backup files, target []snapshot.File, extras bool) ([]fileDiff, int, error) {
	onTarget := make(map[string]int, len(target))
	for i, f := range target {
		onTarget[strings.TrimSuffix(f.Path, "/")] = i
	}
	var diffs []fileDiff
	identical := 0
	err := backup(func(want snapshot.File) error {
		key := strings.TrimSuffix(want.Path, "/")
		i, ok := onTarget[key]
		if !ok {
			diffs = append(diffs, fileDiff{want.Path, snapshot.StatusMissing, "not on the target"})
			return nil
		}
		delete(onTarget, key)
		if detail := fileDifference(want, target[i]); detail != "" {
			diffs = append(diffs, fileDiff{want.Path, snapshot.StatusDifferent, detail})
			return nil
		}
		identical++
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	if extras {
		for _, got := range target {
			key := strings.TrimSuffix(got.Path, "/")
			if _, left := onTarget[key]; !left || key == "lost+found" {
				continue
			}
			diffs = append(diffs, fileDiff{got.Path, snapshot.StatusDifferent, "not in the backup"})
		}
	}
	return diffs, identical, nil
}

// fileDifference names every field in which got differs from want, with both values.
func fileDifference(want, got snapshot.File) string {
	if want.Type != got.Type {
		return fmt.Sprintf("type: backup %s, target %s", want.Type, got.Type)
	}
	var fields []string
	differ := func(field string, b, t any) {
		if b != t {
			fields = append(fields, fmt.Sprintf("%s: backup %v, target %v", field, b, t))
		}
	}
	switch want.Type {
	case "file":
		differ("size", want.Size, got.Size)
		differ("mode", want.Mode, got.Mode)
		differ("sha256", want.SHA256, got.SHA256)
		if want.Hardlink != got.Hardlink {
			fields = append(fields, fmt.Sprintf("hard link to: backup %s, target %s", orNone(want.Hardlink), orNone(got.Hardlink)))
		}
	case "fifo":
		differ("mode", want.Mode, got.Mode)
	case "dir":
		differ("mode", want.Mode, got.Mode)
	case "symlink":
		differ("link", want.Link, got.Link)
	}
	return strings.Join(fields, "; ")
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

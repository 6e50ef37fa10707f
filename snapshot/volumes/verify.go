package volumes

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/ferrykube/ferry/internal/kube"
	"github.com/ferrykube/ferry/snapshot"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// ListResult is what `ferry mover pack --list` prints, as one JSON line.
type ListResult = Listing

// List lists dir's tree as a backup lists a volume, with every file's SHA-256, without sending
// contents anywhere. It is Pack read by Index, so both list alike by construction.
func List(dir string) (Listing, error) {
	return collectListing(func(emit func(snapshot.File) error) ([]SkippedFile, error) { return listEach(dir, emit) })
}

func listEach(dir string, emit func(snapshot.File) error) ([]SkippedFile, error) {
	out, in := io.Pipe()
	go func() { in.CloseWithError(Pack(dir, in)) }()
	skipped, err := IndexEach(out, emit)
	out.CloseWithError(err)
	return skipped, err
}

// WriteList writes List's result to w as one JSON line (a ListResult), each entry as it is
// listed: the mover holds none of a volume's files.
func WriteList(dir string, w io.Writer) error {
	bw := bufio.NewWriterSize(w, 256<<10)
	bw.WriteString(`{"files":[`)
	first := true
	skipped, err := listEach(dir, func(f snapshot.File) error {
		line, err := json.Marshal(f)
		if err != nil {
			return err
		}
		if !first {
			bw.WriteByte(',')
		}
		first = false
		_, err = bw.Write(line)
		return err
	})
	if err != nil {
		return err
	}
	bw.WriteString("]")
	if len(skipped) > 0 {
		rest, err := json.Marshal(skipped)
		if err != nil {
			return err
		}
		bw.WriteString(`,"skipped":`)
		bw.Write(rest)
	}
	bw.WriteString("}\n")
	return bw.Flush()
}

// listingReader reads a ListResult as WriteList writes it, an entry at a time.
type listingReader struct {
	dec     *json.Decoder
	inFiles bool
	done    bool
	skipped []SkippedFile
}

func newListingReader(r io.Reader) (*listingReader, error) {
	l := &listingReader{dec: json.NewDecoder(r)}
	if err := l.delim('{'); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *listingReader) delim(want json.Delim) error {
	tok, err := l.dec.Token()
	if err != nil {
		return err
	}
	if tok != want {
		return fmt.Errorf("%v where %v was due", tok, want)
	}
	return nil
}

// next returns the next entry of the listing; false once there is none. The files Pack left out
// are in skipped once it returned false.
func (l *listingReader) next() (snapshot.File, bool, error) {
	for !l.done {
		if l.inFiles {
			if l.dec.More() {
				var f snapshot.File
				err := l.dec.Decode(&f)
				return f, err == nil, err
			}
			if err := l.delim(']'); err != nil {
				return snapshot.File{}, false, err
			}
			l.inFiles = false
			continue
		}
		if !l.dec.More() {
			l.done = true
			if err := l.delim('}'); err != nil {
				return snapshot.File{}, false, err
			}
			break
		}
		tok, err := l.dec.Token()
		if err != nil {
			return snapshot.File{}, false, err
		}
		switch tok {
		case "files":
			if err := l.delim('['); err != nil {
				return snapshot.File{}, false, err
			}
			l.inFiles = true
		case "skipped":
			if err := l.dec.Decode(&l.skipped); err != nil {
				return snapshot.File{}, false, err
			}
		default:
			var skip json.RawMessage
			if err := l.dec.Decode(&skip); err != nil {
				return snapshot.File{}, false, err
			}
		}
	}
	return snapshot.File{}, false, nil
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
	target, err := c.liveVolume(ctx, ns, v.Name)
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
	// The target's listing is read as the mover prints it, alongside the backup's list: both are
	// in the order of a walk of the tree, and neither is held.
	var stderr bytes.Buffer
	var listed *listingReader
	var diffs []fileDiff
	identical := 0
	// The listing only reads the claim: one whose exec broke off is listed again.
	execErr := kube.RetryBroken(ctx, func() (execErr error) {
		stderr.Reset()
		err, execErr = c.execReading(ctx, kube.ExecRequest{Namespace: ns, Pod: pod, Container: "mover",
			Command: []string{"ferry", "mover", "pack", "--list"}, Stderr: &stderr},
			func(out io.Reader) error {
				var err error
				if listed, err = newListingReader(out); err != nil {
					return fmt.Errorf("%w: %w", errTargetListing, err)
				}
				var root *snapshot.File
				next := func() (snapshot.File, bool, error) {
					f, ok, err := listed.next()
					if ok && f.Path == RootPath {
						listedRoot := f
						root = &listedRoot // compared on its own (Volume.Root)
						f, ok, err = listed.next()
					}
					if !v.Xattrs {
						f.Xattrs = nil // a backup before they moved: the target's are its own
					}
					return f, ok, err
				}
				diffs, identical, err = compareWalks(volumeFiles(ctx, r, v), next, true)
				// The root folder is compared where the mover could set it: a mover that is
				// not root (a restricted namespace) may not change the claim's own.
				if err == nil && v.Root != nil && asRoot(spec) {
					if root == nil {
						diffs = append(diffs, fileDiff{RootPath, snapshot.StatusFailed, "the mover's listing has no root folder (an older mover image?)"})
					} else if detail := fileDifference(*v.Root, *root); detail != "" {
						diffs = append(diffs, fileDiff{RootPath, snapshot.StatusDifferent, detail})
					}
				}
				return err
			})
		return execErr
	}, func(attempt int, err error) {
		c.Log.Warn("the claim's listing broke off; listing it again", "claim", name, "attempt", attempt, "error", err)
	})
	switch {
	case err != nil && !errors.Is(err, errTargetListing):
		report.Add(kindName, snapshot.StatusFailed, name, "could not verify: the backup's file list: "+err.Error())
		return
	case execErr != nil:
		execErr = moverFailed(ctx, c.Client, ns, pod, fmt.Errorf("ferry mover pack --list: %w%s", execErr, moverStderr(stderr.String())))
		report.Add(kindName, snapshot.StatusFailed, name, "could not verify: "+execErr.Error())
		return
	case err != nil:
		report.Add(kindName, snapshot.StatusFailed, name, "could not verify: ferry mover pack --list: "+err.Error())
		return
	}
	report.CountN(kindName, snapshot.StatusIdentical, identical)
	unsteady := map[string]string{}
	for _, s := range listed.skipped {
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

// walkBefore orders paths as a walk of the tree meets them (filepath.WalkDir: a directory's
// entries by name, each directory's tree right after it), name by name; a directory's trailing
// slash does not count.
func walkBefore(a, b string) int {
	a, b = strings.TrimSuffix(a, "/"), strings.TrimSuffix(b, "/")
	for {
		ha, ra, moreA := strings.Cut(a, "/")
		hb, rb, moreB := strings.Cut(b, "/")
		if c := strings.Compare(ha, hb); c != 0 {
			return c
		}
		switch {
		case !moreA && !moreB:
			return 0
		case !moreA:
			return -1 // a directory before what it holds
		case !moreB:
			return 1
		}
		a, b = ra, rb
	}
}

// errTargetListing marks an error of the target's listing, not the backup's.
var errTargetListing = errors.New("the target's listing")

// compareWalks compares a volume's files in the backup with those listed on the target, both in
// walk order (see walkBefore), the target's read an entry at a time by next: by type, and by
// size, mode, SHA-256 and hard link (files), mode (directories, FIFOs) or target (symlinks).
// With extras, files on the target that the backup lacks are differences too (a top-level
// lost+found excepted: the filesystem makes it). It returns the differences, in the backup's
// order, and how many files were identical; it holds neither list. An error of either list
// (see joinWalks) makes the comparison void.
func compareWalks(backup files, next func() (snapshot.File, bool, error), extras bool) ([]fileDiff, int, error) {
	var diffs []fileDiff
	identical := 0
	err := joinWalks(backup, next, func(want, got *snapshot.File) {
		switch {
		case want == nil:
			if extras && strings.TrimSuffix(got.Path, "/") != "lost+found" {
				diffs = append(diffs, fileDiff{got.Path, snapshot.StatusDifferent, "not in the backup"})
			}
		case got == nil:
			diffs = append(diffs, fileDiff{want.Path, snapshot.StatusMissing, "not on the target"})
		default:
			if detail := fileDifference(*want, *got); detail != "" {
				diffs = append(diffs, fileDiff{want.Path, snapshot.StatusDifferent, detail})
			} else {
				identical++
			}
		}
	})
	if err != nil {
		return nil, 0, err
	}
	return diffs, identical, nil
}

// joinWalks pairs a volume's files in the backup with the target's, both read as streams in walk
// order, and hands visit each pair of one path, each file of the backup the target lacks (got
// nil) and each of the target the backup lacks (want nil), in walk order. A list out of that
// order is an error, never a wrong pairing; an error of the target's list (next's, or its order)
// matches errTargetListing.
func joinWalks(backup files, next func() (snapshot.File, bool, error), visit func(want, got *snapshot.File)) error {
	var got snapshot.File
	have, prevTarget := false, ""
	advance := func() error {
		f, ok, err := next()
		if err != nil {
			return fmt.Errorf("%w: %w", errTargetListing, err)
		}
		if ok && prevTarget != "" && walkBefore(prevTarget, f.Path) >= 0 {
			return fmt.Errorf("%w: it has %q after %q, not in the order of a walk", errTargetListing, f.Path, prevTarget)
		}
		got, have = f, ok
		if ok {
			prevTarget = f.Path
		}
		return nil
	}
	if err := advance(); err != nil {
		return err
	}
	prevBackup := ""
	err := backup(func(want snapshot.File) error {
		if prevBackup != "" && walkBefore(prevBackup, want.Path) >= 0 {
			return fmt.Errorf("%w: it has %q after %q, not in the order of a walk", errFileList, want.Path, prevBackup)
		}
		prevBackup = want.Path
		for have && walkBefore(got.Path, want.Path) < 0 {
			visit(nil, &got)
			if err := advance(); err != nil {
				return err
			}
		}
		if !have || walkBefore(got.Path, want.Path) != 0 {
			visit(&want, nil)
			return nil
		}
		visit(&want, &got)
		return advance()
	})
	if err != nil {
		return err
	}
	for have {
		visit(nil, &got)
		if err := advance(); err != nil {
			return err
		}
	}
	return nil
}

// asRoot says whether the mover pod runs as root.
func asRoot(pod *corev1.Pod) bool {
	for _, c := range pod.Spec.Containers {
		if c.SecurityContext == nil || c.SecurityContext.RunAsUser == nil || *c.SecurityContext.RunAsUser != 0 {
			return false
		}
	}
	return true
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
	if !maps.Equal(want.Xattrs, got.Xattrs) {
		fields = append(fields, xattrDifference(want.Xattrs, got.Xattrs))
	}
	return strings.Join(fields, "; ")
}

// xattrDifference says how a file's extended attributes on the target differ from the backup's,
// by name only: a value is the file's, as its contents are.
func xattrDifference(want, got map[string]string) string {
	var changed []string
	for name, v := range want {
		if g, ok := got[name]; ok && g != v {
			changed = append(changed, name)
		}
	}
	out := fmt.Sprintf("extended attributes: backup %s, target %s", xattrNames(want), xattrNames(got))
	if len(changed) > 0 {
		slices.Sort(changed)
		out += " (another value: " + strings.Join(changed, ", ") + ")"
	}
	return out
}

// xattrNames lists extended attributes by name.
func xattrNames(xattrs map[string]string) string {
	if len(xattrs) == 0 {
		return "none"
	}
	return strings.Join(slices.Sorted(maps.Keys(xattrs)), ", ")
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

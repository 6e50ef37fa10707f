package volumes

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	"github.com/ferrykube/ferry/internal/kube"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/storage"
	"github.com/ferrykube/ferry/storage/repo"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/sync/errgroup"
)

// RepoPrefix is where backups encrypted to recipients keep their chunk repository: a repository
// is encrypted to one set of recipients, so each set has its own; unencrypted backups share
// repo.DefaultPrefix.
func RepoPrefix(recipients []string) string {
	if len(recipients) == 0 {
		return repo.DefaultPrefix
	}
	set := slices.Clone(recipients)
	sort.Strings(set)
	sum := sha256.Sum256([]byte(strings.Join(slices.Compact(set), "\n")))
	return strings.TrimSuffix(repo.DefaultPrefix, "/") + "-age-" + hex.EncodeToString(sum[:8]) + "/"
}

// openRepo opens the repository at opts.Prefix, making it when there is none (of two backups
// making it at once, one makes it and the other opens it).
func openRepo(ctx context.Context, store storage.Backend, opts repo.Options) (*repo.Repo, error) {
	r, err := repo.Open(ctx, store, opts)
	if errors.Is(err, repo.ErrNotRepo) {
		r, err = repo.Init(ctx, store, opts)
		if errors.Is(err, storage.ErrExists) {
			r, err = repo.Open(ctx, store, opts)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("chunk repository %s: %w", opts.Prefix, err)
	}
	return r, nil
}

// maxPrevious bounds the complete backups, newest first, searched for a claim's previous tree.
const maxPrevious = 10

// streamTree runs `ferry mover pack --tree` in the pod with the previous tree's stats on stdin,
// writes each file's data through a writer of the chunk repository (reusing the previous tree's
// entries of unchanged files), and stores the volume's tree stream and its file list. The writer
// is released once the backup is recorded (snapshot.Writer.Hold).
func (c Contents) streamTree(ctx context.Context, w *snapshot.Writer, v plans.Volume, pod string, entry snapshot.Volume) (snapshot.Volume, []SkippedFile, error) {
	cw, err := c.repo.NewWriter(ctx)
	if err != nil {
		return entry, nil, fmt.Errorf("chunk repository: %w", err)
	}
	w.Hold(cw.Close)
	// Read after the writer's lock is taken: the previous entries reused are then checked
	// against the packs a prune condemned since (Writer.Reusable).
	prev, from := c.previousTree(ctx, w, v, cw)
	var stdin bytes.Buffer
	if err := writePrevStats(&stdin, prev); err != nil {
		return entry, nil, err
	}
	list, err := w.NewFileList(ctx, v.Namespace, v.Name)
	if err != nil {
		return entry, nil, err
	}
	treeOut, treeIn := io.Pipe()
	tree, err := newTreeWriter(treeIn)
	if err != nil {
		list.Abort(err)
		return entry, nil, err
	}
	stored := make(chan error, 1)
	file := TreeFile(v.Namespace, v.Name)
	go func() {
		key, err := w.Put(ctx, file, treeOut)
		if err != nil {
			err = fmt.Errorf("store the tree %s: %w", file, err)
		}
		entry.Key = key
		treeOut.CloseWithError(err)
		stored <- err
	}()
	fail := func(err error) (snapshot.Volume, []SkippedFile, error) {
		list.Abort(err)
		treeIn.CloseWithError(err)
		<-stored
		return entry, nil, err
	}

	tarOut, tarIn := io.Pipe()
	var stderr bytes.Buffer
	go func() {
		err := c.exec(ctx, kube.ExecRequest{Namespace: v.Namespace, Pod: pod, Container: "mover",
			Command: []string{"ferry", "mover", "pack", "--tree"}, Stdin: &stdin, Stdout: tarIn, Stderr: &stderr})
		if err != nil {
			err = fmt.Errorf("ferry mover pack --tree: %w%s", err, moverStderr(stderr.String()))
		}
		tarIn.CloseWithError(err)
	}()
	files := fileCounter{list: list}
	unchanged := func(name string) (int64, string, bool) {
		e, ok := prev[name]
		return e.Size, e.SHA256, ok
	}
	indexOut, indexIn := io.Pipe()
	var skipped []SkippedFile
	var g errgroup.Group
	g.Go(func() error {
		var err error
		skipped, err = indexEach(indexOut, files.add, unchanged)
		if err != nil {
			indexOut.CloseWithError(err)
			return err
		}
		io.Copy(io.Discard, indexOut)
		return nil
	})
	g.Go(func() error {
		in := io.TeeReader(tarOut, indexIn)
		err := chunkTar(ctx, in, cw, prev, tree.add)
		if err == nil {
			_, err = io.Copy(io.Discard, in) // whatever follows the end marker
		}
		tarOut.CloseWithError(err)
		indexIn.CloseWithError(err)
		return err
	})
	if err := g.Wait(); err != nil {
		return fail(err)
	}
	if err := cw.Flush(ctx); err != nil {
		return fail(fmt.Errorf("chunk repository: %w", err))
	}
	if err := tree.close(); err != nil {
		return fail(err)
	}
	treeIn.Close()
	if err := <-stored; err != nil {
		list.Abort(err)
		return entry, nil, err
	}
	fl, err := list.Close()
	if err != nil {
		return entry, nil, err
	}
	st := cw.Stats()
	c.Log.Info("volume stored in the chunk repository", "claim", v.Namespace+"/"+v.Name, "previous", from,
		"unchanged", len(prev) > 0, "bytes", st.Bytes, "newBytes", st.NewBytes, "uploaded", st.StoredBytes, "packs", st.Packs)
	entry.Format, entry.Repo, entry.List, entry.Bytes = snapshot.FormatChunks, c.repo.Prefix(), &fl, files.bytes
	return entry, skipped, nil
}

// previousBackup is a complete, unencrypted backup a chunked capture may continue from.
type previousBackup struct {
	name     string
	manifest *snapshot.Manifest
}

// recentBackups are the storage's newest complete unencrypted backups but current, newest first
// (at most maxPrevious), read once per capture: where each claim's previous tree is looked for.
// A backup that cannot be read is only not a candidate.
func recentBackups(ctx context.Context, store storage.Backend, current string) []previousBackup {
	infos, _ := snapshot.List(ctx, store)
	infos = slices.DeleteFunc(infos, func(i snapshot.Info) bool { return i.State != snapshot.Complete || i.Name == current })
	sort.SliceStable(infos, func(i, j int) bool { return infos[i].CompletedAt.After(infos[j].CompletedAt) })
	var out []previousBackup
	for _, info := range infos[:min(len(infos), maxPrevious)] {
		m, err := snapshot.ReadManifest(ctx, store, info.Name)
		if err != nil || m.Encryption != nil {
			continue
		}
		out = append(out, previousBackup{name: info.Name, manifest: m})
	}
	return out
}

// previousTree is the tree of the claim's newest complete backup in the same repository (of
// c.previous), by path, without the entries whose chunks cannot be reused (see Writer.Reusable);
// none for an encrypted backup, whose previous trees ferry cannot read without the identity. A
// previous tree that cannot be read makes a full backup, never a failed one.
func (c Contents) previousTree(ctx context.Context, w *snapshot.Writer, v plans.Volume, cw *repo.Writer) (map[string]treeEntry, string) {
	if w.Encrypted() {
		return nil, ""
	}
	for _, b := range c.previous {
		i := slices.IndexFunc(b.manifest.Volumes, func(pv snapshot.Volume) bool {
			return pv.Namespace == v.Namespace && pv.Name == v.Name && pv.Format == snapshot.FormatChunks && pv.Repo == c.repo.Prefix()
		})
		if i < 0 {
			continue
		}
		prev, err := readPrevious(ctx, c.Storage, b.name, b.manifest.Volumes[i], cw)
		if err != nil {
			c.Log.Warn("the claim's previous backup cannot be read: backing up every file", "claim", v.Namespace+"/"+v.Name, "backup", b.name, "error", err)
			return nil, ""
		}
		return prev, b.name
	}
	return nil, ""
}

func readPrevious(ctx context.Context, store storage.Backend, name string, v snapshot.Volume, cw *repo.Writer) (map[string]treeEntry, error) {
	prev := map[string]treeEntry{}
	err := eachTreeEntry(ctx, store, name, v, func(e treeEntry) {
		if e.Path != "" {
			prev[string(e.Path)] = e // a later entry of a name replaces the earlier
		}
	})
	if err != nil {
		return nil, err
	}
	for p, e := range prev {
		if e.Stat == "" || !cw.Reusable(e.Data) {
			delete(prev, p)
		}
	}
	return prev, nil
}

// eachTreeEntry calls fn with every entry of the tree stream of volume v of the unencrypted
// backup name, read to its end and checked against the manifest.
func eachTreeEntry(ctx context.Context, store storage.Backend, name string, v snapshot.Volume, fn func(treeEntry)) error {
	r, err := snapshot.Open(ctx, store, name, nil)
	if err != nil {
		return err
	}
	rc, err := r.Open(ctx, v.Key)
	if err != nil {
		return err
	}
	err = readTree(rc, func(e treeEntry) error {
		fn(e)
		return nil
	})
	if derr := snapshot.Drain(rc); err == nil {
		err = derr
	}
	return err
}

// openTree opens a chunked volume as the zstd-compressed archive it stands for, as stage reads a
// stored one: every chunk is checked before its bytes are sent, and the tree stream against the
// manifest before the archive's end marker. An error ends the archive with a block the mover
// fails on (see untree), then the stream; Close, and Err once the stream ended, return it.
func openTree(ctx context.Context, r *snapshot.Reader, v snapshot.Volume) (*treeStream, error) {
	rp, err := repo.Open(ctx, r.Store(), repo.Options{Prefix: v.Repo, Identities: r.Identities()})
	if err != nil {
		return nil, fmt.Errorf("chunk repository %s: %w", v.Repo, err)
	}
	tree, err := r.Open(ctx, v.Key)
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	t := &treeStream{PipeReader: pr, done: make(chan struct{})}
	go func() {
		defer close(t.done)
		enc, err := zstd.NewWriter(pw, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
		if err == nil {
			err = untree(ctx, tree, rp, enc, func() error { return snapshot.Drain(tree) })
			if cerr := enc.Close(); err == nil {
				err = cerr
			}
		}
		tree.Close()
		if err != nil {
			t.err = fmt.Errorf("%s/%s: %w", r.Name(), v.Key, err)
		}
		pw.Close()
	}()
	return t, nil
}

// treeStream is the archive openTree makes.
type treeStream struct {
	*io.PipeReader
	done chan struct{}
	err  error
}

// Err is the error that ended the archive, once it ended; nil before.
func (t *treeStream) Err() error {
	select {
	case <-t.done:
		return t.err
	default:
		return nil
	}
}

// Close stops the archive and returns its error, if it had one.
func (t *treeStream) Close() error {
	t.PipeReader.Close()
	<-t.done
	return t.err
}

// ChunkRefs calls fn with the chunks of every chunked volume of the complete backups in store
// whose repository is at prefix: what a prune of that repository keeps. A backup it cannot read
// is an error: nothing may be pruned then.
func ChunkRefs(ctx context.Context, store storage.Backend, prefix string, fn func([]repo.ChunkRef)) error {
	infos, err := snapshot.List(ctx, store)
	if err != nil {
		return err
	}
	for _, info := range infos {
		if info.State != snapshot.Complete {
			continue // an incomplete backup's writer holds its lock while it runs
		}
		m, err := snapshot.ReadManifest(ctx, store, info.Name)
		if err != nil {
			return err
		}
		for _, v := range m.Volumes {
			if v.Format != snapshot.FormatChunks || v.Repo != prefix {
				continue
			}
			if m.Encryption != nil {
				return fmt.Errorf("backup %s is encrypted: reading its trees needs the identity", info.Name)
			}
			if err := eachTreeEntry(ctx, store, info.Name, v, func(e treeEntry) { fn(e.Data) }); err != nil {
				return fmt.Errorf("backup %s: %s: %w", info.Name, v.Key, err)
			}
		}
	}
	return nil
}

// PruneChunks removes the chunks of the unencrypted chunk repository that no complete backup in
// store references (repo.Prune); nil without a repository. An encrypted repository needs the
// identity and is left alone.
func PruneChunks(ctx context.Context, store storage.Backend) (*repo.PruneResult, error) {
	rp, err := repo.Open(ctx, store, repo.Options{})
	if errors.Is(err, repo.ErrNotRepo) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("chunk repository %s: %w", repo.DefaultPrefix, err)
	}
	res, err := rp.Prune(ctx, func(ctx context.Context) ([]repo.ChunkRef, error) {
		var refs []repo.ChunkRef
		err := ChunkRefs(ctx, store, rp.Prefix(), func(r []repo.ChunkRef) { refs = append(refs, r...) })
		return refs, err
	})
	if err != nil {
		return nil, fmt.Errorf("prune the chunk repository %s: %w", repo.DefaultPrefix, err)
	}
	return &res, nil
}

package volumes

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"

	"filippo.io/age"

	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/internal/kube"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/storage"
	"github.com/ferrykube/ferry/storage/repo"
	"github.com/klauspost/compress/zstd"
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

// streamTree runs `ferry mover pack --tree` in the pod with the previous tree's stats on stdin,
// writes each file's data through a writer of the chunk repository (reusing the previous tree's
// entries of unchanged files), and stores the volume's tree stream and its file list. The writer
// is released once the backup is recorded (snapshot.Writer.Hold). The previous tree is streamed,
// never held (see prevtree.go); without continueFrom (see errPreviousTree) there is none, and
// every file is read.
func (c Contents) streamTree(ctx context.Context, w *snapshot.Writer, v plans.Volume, pod string, entry snapshot.Volume, continueFrom bool) (snapshot.Volume, []SkippedFile, error) {
	cw, err := c.repo.NewWriter(ctx)
	if err != nil {
		return entry, nil, fmt.Errorf("chunk repository: %w", err)
	}
	w.Hold(cw.Close, cw.Held)
	// Opened after the writer's lock is taken: the previous entries reused are then checked
	// against the packs a prune condemned since (Writer.Reusable).
	var prev *prevTree
	if continueFrom {
		prev = c.previousTree(ctx, w, v)
	}
	var prevRead *previous
	if prev != nil {
		it, err := prev.open(ctx)
		if err != nil {
			c.Log.Warn("the claim's previous backup cannot be read: backing up every file", "claim", v.Namespace+"/"+v.Name, "backup", prev.backup, "error", err)
			prev = nil
		} else {
			var again *prevIter
			defer func() {
				it.lines.close()
				if again != nil {
					again.lines.close()
				}
			}()
			prevRead = &previous{iter: it, hold: heldEntries, reopen: func() (*prevIter, error) {
				var err error
				again, err = prev.open(ctx)
				return again, err
			}}
		}
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
		key, err := w.Put(storage.WithSmallParts(ctx), file, treeOut)
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

	var stderr bytes.Buffer
	pack := func(stdin io.Reader, stdout io.Writer) error {
		err := c.exec(ctx, kube.ExecRequest{Namespace: v.Namespace, Pod: pod, Container: "mover",
			Command: []string{"ferry", "mover", "pack", "--tree"}, Stdin: stdin, Stdout: stdout, Stderr: &stderr})
		if err != nil {
			err = fmt.Errorf("ferry mover pack --tree: %w%s", err, moverStderr(stderr.String()))
		}
		return err
	}
	files := fileCounter{list: list}
	skipped, reused, err := packChunks(ctx, cw, prevRead, pack, tree.add, files.add)
	if err != nil {
		if prev != nil {
			err = fmt.Errorf("%w (continuing from backup %s)", err, prev.backup)
		}
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
	from := ""
	if prev != nil {
		from = prev.backup
		if prevRead.iter.OutOfOrder != "" {
			c.Log.Warn("the previous tree is not in the order of the volume's walk from an entry on: the files after it were read", "claim", v.Namespace+"/"+v.Name, "backup", from)
		}
	}
	c.Log.Info("volume stored in the chunk repository", "claim", v.Namespace+"/"+v.Name, "previous", from,
		"unchanged", reused.files, "bytes", st.Bytes, "newBytes", st.NewBytes, "uploaded", st.StoredBytes, "packs", st.Packs)
	entry.Format, entry.Repo, entry.List, entry.Bytes, entry.Root = snapshot.FormatChunks, c.repo.Prefix(), &fl, files.bytes, files.root
	// What was read: the writer's bytes count the chunks of unchanged files too.
	entry.NewPackBytes, entry.ReadBytes, entry.UnchangedFiles = st.StoredBytes, max(st.Bytes-reused.bytes, 0), int64(reused.files)
	return entry, skipped, nil
}

// unread counts the files a chunked backup took unchanged from the previous tree, and their bytes.
type unread struct {
	files int
	bytes int64
}

// previous is a previous tree as packChunks reads it: iter, read once for the mover's stats and
// the entries of the files it finds unchanged, and reopen, which reads it again for the entries
// when more than hold of them waited (see handoff).
type previous struct {
	iter   *prevIter
	reopen func() (*prevIter, error)
	hold   int
}

// heldEntries is previous.hold of a backup: about 1.5 KiB each of small files, and more than the
// exec streams' buffers hold of their stats.
const heldEntries = 16384

// packChunks runs pack, the mover's `pack --tree` (stdin the previous stats, stdout its tar
// stream), feeding it the stats of prev as it reads them; writes each entry's data through cw
// and the entry to emit, taking unchanged files' entries from prev; and hands the files to list.
// prev is nil without a previous tree. It returns the files the mover left out, and the files it
// found unchanged (not read).
func packChunks(ctx context.Context, cw *repo.Writer, prev *previous, pack func(stdin io.Reader, stdout io.Writer) error,
	emit func(treeEntry) error, list func(snapshot.File) error) ([]SkippedFile, unread, error) {
	var hand *handoff
	if prev != nil {
		prev.iter.lines.noHeads = true
		hand = &handoff{hold: prev.hold, reopen: prev.reopen}
	}
	// The stats go to the mover as it reads them; once it is gone, what it did not read is dropped.
	stdinOut, stdinIn := io.Pipe()
	fed := make(chan error, 1)
	go func() {
		var err error
		if prev != nil {
			err = writePrevStats(stdinIn, prev.iter, func(e treeEntry) bool { return cw.Reusable(e.Data) }, hand.sent)
		} else {
			io.WriteString(stdinIn, treeEnd+"\n")
		}
		stdinIn.Close()
		fed <- err
	}()
	tarOut, tarIn := io.Pipe()
	go func() {
		err := pack(stdinOut, tarIn)
		stdinOut.CloseWithError(io.ErrClosedPipe)
		tarIn.CloseWithError(err)
	}()
	var find prevFinder
	var reused unread
	if hand != nil {
		find = func(name string) (treeEntry, bool, error) {
			e, ok, err := hand.find(name)
			if ok {
				reused.files++
				reused.bytes += e.DataBytes
			}
			return e, ok, err
		}
	}
	index := newFileIndex(list)
	err := chunkTar(ctx, tarOut, cw, find, emit, index)
	if err == nil {
		_, err = io.Copy(io.Discard, tarOut) // whatever follows the end marker
	}
	tarOut.CloseWithError(err)
	var skipped []SkippedFile
	if err == nil {
		skipped, err = index.end()
	}
	// A tree that does not read is the cause of what the mover then says of its stdin; a feed cut
	// off because the mover ended is not.
	if ferr := <-fed; ferr != nil && (err == nil || !errors.Is(ferr, io.ErrClosedPipe)) {
		err = fmt.Errorf("%w: its tree: %w", errPreviousTree, ferr)
	}
	return skipped, reused, err
}

// prevTree is the tree stream of a claim in a previous backup.
type prevTree struct {
	store  storage.Backend
	backup string
	volume snapshot.Volume
}

// open reads the tree afresh, through prevIter.
func (p *prevTree) open(ctx context.Context) (*prevIter, error) {
	r, err := snapshot.Open(ctx, p.store, p.backup, nil)
	if err != nil {
		return nil, err
	}
	rc, err := r.Open(ctx, p.volume.Key)
	if err != nil {
		return nil, err
	}
	lines, err := newTreeLines(rc)
	if err != nil {
		rc.Close()
		return nil, err
	}
	// Closing the lines closes the stream too.
	lines.closer = rc
	return &prevIter{lines: lines}, nil
}

// previousTree is the tree of the claim's newest complete backup in the same repository (of
// c.previous), its stored bytes checked against its manifest; nil for an encrypted
// backup, whose previous trees ferry cannot read without the identity (docs/format.md,
// "Incremental backups"). A previous tree that cannot be read makes a full backup, never a
// failed one.
func (c Contents) previousTree(ctx context.Context, w *snapshot.Writer, v plans.Volume) *prevTree {
	if w.Encrypted() {
		c.Log.Info("an encrypted backup reads every file: the previous trees are encrypted to the recipients, and ferry writes without the identity", "claim", v.Namespace+"/"+v.Name)
		return nil
	}
	for _, b := range c.previous {
		i := slices.IndexFunc(b.Manifest.Volumes, func(pv snapshot.Volume) bool {
			return pv.Namespace == v.Namespace && pv.Name == v.Name && pv.Format == snapshot.FormatChunks && pv.Repo == c.repo.Prefix()
		})
		if i < 0 {
			continue
		}
		p := &prevTree{store: c.Storage, backup: b.Name, volume: b.Manifest.Volumes[i]}
		// Checked whole before it is trusted; its lines are decoded after, as the mover's stats
		// are sent (see handoff), so not here.
		r, err := snapshot.Open(ctx, c.Storage, b.Name, nil)
		if err == nil {
			err = r.CheckFile(ctx, p.volume.Key)
		}
		if err != nil {
			c.Log.Warn("the claim's previous backup cannot be read: backing up every file", "claim", v.Namespace+"/"+v.Name, "backup", b.Name, "error", err)
			return nil
		}
		return p
	}
	return nil
}

// eachTreeEntry calls fn with every entry of the tree stream of volume v of backup name (read
// with ids when it is encrypted), read to its end and checked against the manifest.
func eachTreeEntry(ctx context.Context, store storage.Backend, name string, v snapshot.Volume, ids []age.Identity, fn func(treeEntry)) error {
	r, err := snapshot.Open(ctx, store, name, ids)
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
// With a base (the claim's tree in the backup a restore before left on the target; nil for
// none), the files the base has as v has them are sent as kept entries (see untree); a base
// that cannot be read only costs sending them.
func openTree(ctx context.Context, r *snapshot.Reader, v snapshot.Volume, base *prevTree) (*treeStream, error) {
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
		var kept *prevIter
		if base != nil {
			if it, err := base.open(ctx); err == nil {
				kept = it
				defer it.lines.close()
			}
		}
		enc, err := zstd.NewWriter(pw, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
		if err == nil {
			t.sent, err = untree(ctx, tree, rp, enc, func() error { return snapshot.Drain(tree) }, kept)
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
	sent int64 // bytes of file contents sent, once the archive ended
}

// Sent is the bytes of file contents the archive held, once it ended; 0 before.
func (t *treeStream) Sent() int64 {
	select {
	case <-t.done:
		return t.sent
	default:
		return 0
	}
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
// whose repository is at prefix, a tree entry's at a time: what a prune of that repository keeps.
// A backup it cannot read is an error: nothing may be pruned then; so is an encrypted one (see
// EncryptedChunkRefs).
func ChunkRefs(ctx context.Context, store storage.Backend, prefix string, fn func([]repo.ChunkRef)) error {
	return EncryptedChunkRefs(ctx, store, prefix, nil, fn)
}

// EncryptedChunkRefs is ChunkRefs reading the trees of encrypted backups with ids.
func EncryptedChunkRefs(ctx context.Context, store storage.Backend, prefix string, ids []age.Identity, fn func([]repo.ChunkRef)) error {
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
			if m.Encryption != nil && len(ids) == 0 {
				return badinput.Errorf("backup %s is encrypted: reading its trees: %w", info.Name, snapshot.ErrNoIdentity)
			}
			if err := eachTreeEntry(ctx, store, info.Name, v, ids, func(e treeEntry) { fn(e.Data) }); err != nil {
				return fmt.Errorf("backup %s: %s: %w", info.Name, v.Key, err)
			}
		}
	}
	return nil
}

// ChunkRepos lists the chunk repositories in store: the unencrypted one (repo.DefaultPrefix),
// when there is one, and one per set of recipients backups were encrypted to (RepoPrefix), by
// prefix, with whether each is encrypted.
func ChunkRepos(ctx context.Context, store storage.Backend) (map[string]bool, error) {
	out := map[string]bool{}
	if _, err := store.Stat(ctx, repo.DefaultPrefix+"config"); err == nil {
		out[repo.DefaultPrefix] = false
	} else if !errors.Is(err, storage.ErrNotExist) {
		return nil, fmt.Errorf("chunk repository %s: %w", repo.DefaultPrefix, err)
	}
	age := RepoPrefix([]string{"x"})
	age = age[:strings.LastIndex(age, "-")+1] // the prefix before the recipients' hash
	err := store.List(ctx, age, func(o storage.ObjectInfo) error {
		if rest, ok := strings.CutPrefix(o.Key, age); ok {
			if hash, file, ok := strings.Cut(rest, "/"); ok && file == "config" {
				out[age+hash+"/"] = true
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list the chunk repositories: %w", err)
	}
	return out, nil
}

// PruneChunks removes the chunks of every chunk repository in store (ChunkRepos) that no complete
// backup in store references (repo.Prune), and returns what it did in all; nil without a
// repository. An encrypted repository's prune reads its keys and the kept backups' trees with ids:
// without them it is an error matching badinput, and no repository is pruned.
func PruneChunks(ctx context.Context, store storage.Backend, ids []age.Identity) (*repo.PruneResult, error) {
	repos, err := ChunkRepos(ctx, store)
	if err != nil {
		return nil, err
	}
	if len(repos) == 0 {
		return nil, nil
	}
	prefixes := slices.Sorted(maps.Keys(repos))
	var encrypted int
	for _, p := range prefixes {
		if repos[p] {
			encrypted++
		}
	}
	if encrypted > 0 && len(ids) == 0 {
		return nil, badinput.Errorf("%d encrypted chunk repositories: pruning them reads the kept backups' trees: %w", encrypted, snapshot.ErrNoIdentity)
	}
	var total repo.PruneResult
	for _, prefix := range prefixes {
		opts := repo.Options{Prefix: prefix}
		if repos[prefix] {
			opts.Identities = ids
		}
		rp, err := repo.Open(ctx, store, opts)
		if err != nil {
			return &total, fmt.Errorf("chunk repository %s: %w", prefix, err)
		}
		res, err := rp.Prune(ctx, func(ctx context.Context, keep func([]repo.ChunkRef)) error {
			return EncryptedChunkRefs(ctx, store, rp.Prefix(), ids, keep)
		})
		total.Packs += res.Packs
		total.KeptChunks += res.KeptChunks
		total.Repacked += res.Repacked
		total.Condemned += res.Condemned
		total.Waiting += res.Waiting
		total.Deleted += res.Deleted
		total.DeletedBytes += res.DeletedBytes
		total.DeletedUnindexed += res.DeletedUnindexed
		if err != nil {
			return &total, fmt.Errorf("prune the chunk repository %s: %w", prefix, err)
		}
	}
	return &total, nil
}

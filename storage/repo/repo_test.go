package repo

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/restic/chunker"

	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/storage"
)

// randomData is reproducible incompressible data.
func randomData(seed uint64, n int) []byte {
	var s [32]byte
	s[0] = byte(seed)
	b := make([]byte, n)
	rand.NewChaCha8(s).Read(b)
	return b
}

// textData is compressible data that names a marker a test looks for in storage.
func textData(n int) []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "line %d of the notebook: secret-marker-%d\n", i, i%97)
	}
	return b.Bytes()[:n]
}

type fixture struct {
	store storage.Backend
	dir   string
	id    *age.X25519Identity // nil: unencrypted

	packSize, uploads, chunkBits int
}

func newFixture(t *testing.T, encrypted bool) *fixture {
	t.Helper()
	dir := t.TempDir()
	st, err := storage.NewFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	// 64 KiB chunks on average: the counts and shares the tests assert do not depend on where the
	// random polynomial happens to cut a few 1 MiB chunks.
	f := &fixture{store: st, dir: dir, chunkBits: 16}
	if encrypted {
		if f.id, err = age.GenerateX25519Identity(); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// opts are options with the recipients, and with the identity when read is set.
func (f *fixture) opts(read bool) Options {
	o := Options{SkewMargin: -1, PackSize: f.packSize, Uploads: f.uploads, ChunkAverageBits: f.chunkBits}
	if o.PackSize == 0 {
		o.PackSize = 1 << 20
	}
	if f.id != nil {
		o.Recipients = []string{f.id.Recipient().String()}
		if read {
			o.Identities = []age.Identity{f.id}
		}
	}
	return o
}

func (f *fixture) init(t *testing.T) *Repo {
	t.Helper()
	r, err := Init(context.Background(), f.store, f.opts(true))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (f *fixture) open(t *testing.T, o Options) *Repo {
	t.Helper()
	r, err := Open(context.Background(), f.store, o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// write writes data with one writer and closes it.
func write(t *testing.T, r *Repo, data []byte) ([]ChunkRef, Stats) {
	t.Helper()
	ctx := context.Background()
	w, err := r.NewWriter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	refs, err := w.Write(ctx, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	return refs, w.Stats()
}

func readAll(t *testing.T, r *Repo, refs []ChunkRef) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := r.Read(context.Background(), refs, &b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestRoundTrip(t *testing.T) {
	for _, enc := range []bool{false, true} {
		for _, tc := range []struct {
			name string
			data []byte
		}{
			{"empty", nil},
			{"small", []byte("hello")},
			{"random 4MiB", randomData(1, 4<<20)},
			{"text 4MiB", textData(4 << 20)},
		} {
			t.Run(fmt.Sprintf("encrypted=%v/%s", enc, tc.name), func(t *testing.T) {
				f := newFixture(t, enc)
				refs, st := write(t, f.init(t), tc.data)
				got := readAll(t, f.open(t, f.opts(true)), refs)
				if !bytes.Equal(got, tc.data) {
					t.Fatalf("read %d bytes, want %d equal ones", len(got), len(tc.data))
				}
				if strings.HasPrefix(tc.name, "text") && st.StoredBytes > int64(len(tc.data))/4 {
					t.Errorf("text stored in %d bytes, want compressed below a quarter of %d", st.StoredBytes, len(tc.data))
				}
				if strings.HasPrefix(tc.name, "random") && st.StoredBytes > int64(len(tc.data))*101/100 {
					t.Errorf("random data stored in %d bytes, want at most 1%% over %d", st.StoredBytes, len(tc.data))
				}
			})
		}
	}
}

// changedBound stands for TestDedupe's bound on a changed write.
const changedBound = -1

func TestDedupe(t *testing.T) {
	base := randomData(2, 10<<20)
	changed := bytes.Clone(base)
	copy(changed[3<<20:], randomData(3, len(base)/100)) // 1 % of the bytes, in one place
	for _, tc := range []struct {
		name      string
		encrypted bool
		// second opens the repository for the second write
		second func(f *fixture, first *Repo) Options
		data   []byte
		// minNew and maxNew bound the second write's new bytes, in % of its size; maxNew
		// changedBound: the changed bytes and at most the two largest chunks around them (where
		// the random polynomial cuts decides how much more than the change is new).
		minNew, maxNew int64
	}{
		{"plain same", false, func(f *fixture, _ *Repo) Options { return f.opts(false) }, base, 0, 0},
		{"plain 1% changed", false, func(f *fixture, _ *Repo) Options { return f.opts(false) }, changed, 0, changedBound},
		{"encrypted with identity, same", true, func(f *fixture, _ *Repo) Options { return f.opts(true) }, base, 0, 0},
		{"encrypted with identity, 1% changed", true, func(f *fixture, _ *Repo) Options { return f.opts(true) }, changed, 0, changedBound},
		{"encrypted with the writer key only, 1% changed", true, func(f *fixture, first *Repo) Options {
			o := f.opts(false)
			o.Key = first.WriterKey()
			return o
		}, changed, 0, changedBound},
		// A backup's writers open the repository write-only: the index keeps packs alone.
		{"plain write-only, 1% changed", false, func(f *fixture, _ *Repo) Options {
			o := f.opts(false)
			o.WriteOnly = true
			return o
		}, changed, 0, changedBound},
		{"encrypted with the writer key only, write-only, same", true, func(f *fixture, first *Repo) Options {
			o := f.opts(false)
			o.Key, o.WriteOnly = first.WriterKey(), true
			return o
		}, base, 0, 0},
		// The trade-off: without identity and key a writer has a namespace of its own.
		{"encrypted with recipients only, same", true, func(f *fixture, _ *Repo) Options { return f.opts(false) }, base, 100, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.encrypted)
			first := f.init(t)
			refs1, st1 := write(t, first, base)
			if st1.NewBytes != int64(len(base)) {
				t.Fatalf("first write: %d new bytes, want %d", st1.NewBytes, len(base))
			}
			second := f.open(t, tc.second(f, first))
			refs2, st2 := write(t, second, tc.data)
			pct := float64(st2.NewBytes) * 100 / float64(len(tc.data))
			t.Logf("second write: %d of %d bytes new (%.2f %%), %d bytes uploaded in %d packs", st2.NewBytes, len(tc.data), pct, st2.StoredBytes, st2.Packs)
			maxNew := float64(tc.maxNew)
			if tc.maxNew == changedBound {
				maxNew = float64(len(base)/100+2*int(first.Config().MaxSize)) * 100 / float64(len(tc.data))
			}
			if pct < float64(tc.minNew) || pct > maxNew {
				t.Errorf("second write uploaded %.2f %% new bytes, want %d..%.2f %%", pct, tc.minNew, maxNew)
			}
			if tc.maxNew == 0 && st2.StoredBytes != 0 {
				t.Errorf("second write uploaded %d bytes of packs, want none", st2.StoredBytes)
			}
			reader := f.open(t, f.opts(true))
			if got := readAll(t, reader, refs1); !bytes.Equal(got, base) {
				t.Error("first write does not read back")
			}
			if got := readAll(t, reader, refs2); !bytes.Equal(got, tc.data) {
				t.Error("second write does not read back")
			}
		})
	}
}

// TestWriteOnlyRefusesReads: a repository opened write-only keeps no chunk's place in its pack,
// so reads, checks and prunes of it are refused, not answered wrong.
func TestWriteOnlyRefusesReads(t *testing.T) {
	f := newFixture(t, false)
	refs, _ := write(t, f.init(t), randomData(4, 1<<20))
	o := f.opts(true)
	o.WriteOnly = true
	r := f.open(t, o)
	if err := r.Read(context.Background(), refs, io.Discard); !errors.Is(err, ErrWriteOnly) {
		t.Errorf("Read: %v", err)
	}
	if _, err := r.Check(context.Background(), 1); !errors.Is(err, ErrWriteOnly) {
		t.Errorf("Check: %v", err)
	}
	if _, err := r.Prune(context.Background(), func(context.Context, func([]ChunkRef)) error { return nil }); !errors.Is(err, ErrWriteOnly) {
		t.Errorf("Prune: %v", err)
	}
	if got := readAll(t, f.open(t, f.opts(true)), refs); !bytes.Equal(got, randomData(4, 1<<20)) {
		t.Error("the data does not read back through a repository opened to read")
	}
}

// TestEncryptedNamesRevealNothing: no stored key and no stored byte sequence is a plain SHA-256 of
// the data or of any of its chunks, and no plaintext is stored.
func TestEncryptedNamesRevealNothing(t *testing.T) {
	f := newFixture(t, true)
	r := f.init(t)
	data := append(textData(3<<20), randomData(4, 3<<20)...)
	write(t, r, data)

	var hashes []string
	whole := sha256.Sum256(data)
	hashes = append(hashes, hex.EncodeToString(whole[:]))
	c := chunker.NewWithBoundaries(bytes.NewReader(data), r.cfg.Polynomial, r.cfg.MinSize, r.cfg.MaxSize)
	c.SetAverageBits(r.cfg.AverageBits)
	for {
		ch, err := c.Next(make([]byte, r.cfg.MaxSize))
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(ch.Data)
		hashes = append(hashes, hex.EncodeToString(sum[:]))
	}
	if len(hashes) < 4 {
		t.Fatalf("only %d chunks", len(hashes)-1)
	}
	n := 0
	err := f.store.List(context.Background(), "", func(o storage.ObjectInfo) error {
		n++
		content, err := os.ReadFile(filepath.Join(f.dir, filepath.FromSlash(o.Key)))
		if err != nil {
			return err
		}
		for _, h := range hashes {
			raw, _ := hex.DecodeString(h)
			if strings.Contains(o.Key, h) || bytes.Contains(content, []byte(h)) || bytes.Contains(content, raw) {
				t.Errorf("%s reveals the plain SHA-256 %s", o.Key, h)
			}
		}
		if bytes.Contains(content, []byte("secret-marker")) || bytes.Contains(content, data[4<<20:4<<20+64]) {
			t.Errorf("%s holds plaintext", o.Key)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 4 {
		t.Fatalf("only %d objects stored", n)
	}
	// The packs' framing shows no chunk sizes: every blob's length field is masked.
	for id, s := range r.index.slots.all() {
		e := r.index.entryOf(s)
		b, err := os.ReadFile(filepath.Join(f.dir, filepath.FromSlash(r.packKey(e.pack))))
		if err != nil {
			t.Fatal(err)
		}
		if got := binary.LittleEndian.Uint32(b[e.off-4:]); int(got) == e.length {
			t.Errorf("chunk %s: its stored length %d is in clear in pack %s", id, e.length, e.pack)
		}
	}
}

// tamper flips one byte of the chunk's stored blob in its pack.
func tamper(t *testing.T, f *fixture, r *Repo, id ID) string {
	t.Helper()
	e, ok := r.lookup(id)
	if !ok {
		t.Fatal("chunk not in the index")
	}
	p := filepath.Join(f.dir, filepath.FromSlash(r.packKey(e.pack)))
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[e.off+int64(e.length)/2] ^= 0x40
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return e.pack
}

func TestTamperedChunkRefused(t *testing.T) {
	for _, enc := range []bool{false, true} {
		for _, which := range []string{"first", "middle"} {
			t.Run(fmt.Sprintf("encrypted=%v/%s chunk", enc, which), func(t *testing.T) {
				f := newFixture(t, enc)
				data := append(textData(4<<20), randomData(5, 4<<20)...)
				refs, _ := write(t, f.init(t), data)
				if len(refs) < 3 {
					t.Fatalf("only %d chunks", len(refs))
				}
				r := f.open(t, f.opts(true))
				k := 0
				if which == "middle" {
					k = len(refs) / 2
				}
				pack := tamper(t, f, r, refs[k].ID)
				prefix := 0
				for _, ref := range refs[:k] {
					prefix += ref.Size
				}

				var out bytes.Buffer
				err := r.Read(context.Background(), refs, &out)
				if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), refs[k].ID.String()) || !strings.Contains(err.Error(), pack) {
					t.Fatalf("Read: %v, want a corrupt chunk error naming chunk %s and pack %s", err, refs[k].ID, pack)
				}
				if !bytes.Equal(out.Bytes(), data[:prefix]) {
					t.Errorf("Read gave out %d bytes, want only the %d verified ones before the tampered chunk", out.Len(), prefix)
				}
				if err := r.Verify(context.Background(), refs); !errors.Is(err, ErrCorrupt) {
					t.Errorf("Verify: %v, want corrupt", err)
				}

				res, err := r.Check(context.Background(), 1)
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("Check: %v, want corrupt", err)
				}
				var chunkNamed, packNamed bool
				for _, p := range res.Problems {
					chunkNamed = chunkNamed || (p.Pack == pack && p.Chunk == refs[k].ID.String())
					packNamed = packNamed || (p.Pack == pack && p.Chunk == "")
				}
				if !chunkNamed || !packNamed {
					t.Errorf("Check problems %+v: want the chunk %s and the pack %s named", res.Problems, refs[k].ID, pack)
				}
				if len(res.Problems) != 2 {
					t.Errorf("Check found %d problems, want 2 (the pack's hash, the chunk)", len(res.Problems))
				}
				if enc {
					// Without the identity Check still finds the pack by its hash.
					ro := f.open(t, f.opts(false))
					res, err := ro.Check(context.Background(), 1)
					if !errors.Is(err, ErrCorrupt) || len(res.Problems) != 1 || res.Problems[0].Pack != pack {
						t.Errorf("Check without identity: %v %+v, want the pack named", err, res.Problems)
					}
					if err := ro.Read(context.Background(), refs, io.Discard); !errors.Is(err, ErrNoIdentity) {
						t.Errorf("Read without identity: %v, want ErrNoIdentity", err)
					}
				}
			})
		}
	}
}

func TestCheckClean(t *testing.T) {
	f := newFixture(t, true)
	write(t, f.init(t), randomData(6, 5<<20))
	res, err := f.open(t, f.opts(true)).Check(context.Background(), 1)
	if err != nil || res.Packs < 2 || res.Chunks < 2 || len(res.Problems) > 0 {
		t.Fatalf("Check: %v %+v", err, res)
	}
}

func keepRefs(sets ...[]ChunkRef) KeepFunc {
	var all []ChunkRef
	for _, s := range sets {
		all = append(all, s...)
	}
	return func(_ context.Context, keep func([]ChunkRef)) error {
		keep(all)
		return nil
	}
}

// packsOf lists the stored packs and the packs the refs are read from.
func packsOf(t *testing.T, f *fixture, r *Repo, refs []ChunkRef) (stored, used map[string]bool) {
	t.Helper()
	stored, used = map[string]bool{}, map[string]bool{}
	if err := f.store.List(context.Background(), r.opts.Prefix+packsDir, func(o storage.ObjectInfo) error {
		stored[filepath.Base(o.Key)] = true
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, ref := range refs {
		e, _ := r.lookup(ref.ID)
		used[e.pack] = true
	}
	return stored, used
}

func TestPrune(t *testing.T) {
	for _, enc := range []bool{false, true} {
		t.Run(fmt.Sprintf("encrypted=%v", enc), func(t *testing.T) {
			ctx := context.Background()
			f := newFixture(t, enc)
			f.packSize, f.uploads = 16<<20, 1 // a pack per backup; C's first chunk far less than half of it
			r := f.init(t)
			a, b, c := randomData(7, 4<<20), randomData(8, 4<<20), randomData(9, 4<<20)
			refsA, _ := write(t, r, a)
			refsB, _ := write(t, r, append(bytes.Clone(a[:2<<20]), b...)) // shares A's start
			refsC, _ := write(t, r, c)

			r = f.open(t, f.opts(true))
			// Keep A and one chunk of C: C's other chunks go, and its pack is repacked. The first
			// prune condemns the unused packs, the second deletes them.
			res, err := r.Prune(ctx, keepRefs(refsA, refsC[:1]))
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("first prune: %+v", res)
			if res.Deleted != 0 || res.Repacked == 0 || res.Condemned == 0 || res.Waiting != 0 {
				t.Errorf("first prune: %+v: want packs repacked and condemned, none deleted nor waiting", res)
			}
			res, err = r.Prune(ctx, keepRefs(refsA, refsC[:1]))
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("second prune: %+v", res)
			if res.Deleted == 0 || res.Repacked+res.Condemned+res.Waiting != 0 {
				t.Errorf("second prune: %+v: want the condemned packs deleted, nothing else done", res)
			}
			if got := readAll(t, r, refsA); !bytes.Equal(got, a) {
				t.Error("kept backup A does not read back")
			}
			if got := readAll(t, r, refsC[:1]); !bytes.Equal(got, c[:refsC[0].Size]) {
				t.Error("kept chunk of C does not read back")
			}
			stored, _ := packsOf(t, f, r, nil)
			_, used := packsOf(t, f, r, append(append([]ChunkRef{}, refsA...), refsC[:1]...))
			for p := range stored {
				if !used[p] {
					t.Errorf("pack %s stored but not used by a kept backup", p)
				}
			}
			if err := r.Verify(ctx, refsB); err == nil {
				t.Error("B still reads after it was pruned")
			}
			if _, err := r.Check(ctx, 1); err != nil {
				t.Errorf("check after prune: %v", err)
			}
			// A third prune finds nothing to do.
			res, err = r.Prune(ctx, keepRefs(refsA, refsC[:1]))
			if err != nil || res.Deleted+res.Repacked+res.Condemned != 0 {
				t.Errorf("third prune: %v %+v, want nothing done", err, res)
			}
			// A kept chunk that is not stored fails the prune before anything is deleted.
			_, err = r.Prune(ctx, keepRefs(refsB))
			if !errors.Is(err, ErrUnknownChunk) {
				t.Errorf("prune keeping a pruned backup: %v, want ErrUnknownChunk", err)
			}
			if got := readAll(t, r, refsA); !bytes.Equal(got, a) {
				t.Error("A does not read back after the refused prune")
			}
		})
	}
}

// TestPruneConcurrentWriter: prunes while writers run delete none of their packs, indexed or
// not, nor the packs they deduped against; a writer that starts after the prune condemned packs
// does not dedupe against them; once the writers are done a prune frees what no kept backup uses.
func TestPruneConcurrentWriter(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, false)
	r := f.init(t)
	old := randomData(10, 3<<20)
	refsOld, _ := write(t, r, old)

	// W dedupes against the old backup and flushes (its backup not yet recorded); W2 has uploaded
	// packs but written no index yet.
	w, err := f.open(t, f.opts(true)).NewWriter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dataW := append(bytes.Clone(old), randomData(11, 3<<20)...)
	refsW, err := w.Write(ctx, bytes.NewReader(dataW))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if st := w.Stats(); st.NewBytes > int64(len(dataW)-len(old)/2) {
		t.Fatalf("W: %d new bytes, want it to dedupe against the old backup", st.NewBytes)
	}
	w2, err := f.open(t, f.opts(true)).NewWriter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	data2 := randomData(12, 6<<20)
	refs2, err := w2.Write(ctx, bytes.NewReader(data2))
	if err != nil {
		t.Fatal(err)
	}
	before, _ := packsOf(t, f, r, nil)

	// The old backup is dropped by retention; W's and W2's are not recorded yet.
	pr := f.open(t, f.opts(true))
	res, err := pr.Prune(ctx, keepRefs())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("prune during writers: %+v", res)
	after, _ := packsOf(t, f, r, nil)
	if res.Deleted != 0 || res.Condemned == 0 {
		t.Fatalf("prune during writers: %+v: want none deleted and the unused ones condemned", res)
	}
	// The next prune may sweep that record, but W and W2 started before it was written.
	res, err = pr.Prune(ctx, keepRefs())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("second prune during writers: %+v", res)
	if res.Deleted != 0 || res.Waiting == 0 {
		t.Fatalf("second prune during writers: %+v: want none deleted and the condemned ones waiting", res)
	}
	after, _ = packsOf(t, f, r, nil)
	for p := range before {
		if !after[p] {
			t.Errorf("pack %s deleted by a prune during writers", p)
		}
	}

	// W3 starts after the condemnation: it uploads the old data again rather than dedupe.
	w3, err := f.open(t, f.opts(true)).NewWriter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	refs3, err := w3.Write(ctx, bytes.NewReader(old))
	if err != nil {
		t.Fatal(err)
	}
	if st := w3.Stats(); st.NewBytes != int64(len(old)) {
		t.Errorf("W3: %d new bytes, want all %d: the old packs are condemned", st.NewBytes, len(old))
	}

	// The writers record their backups, then close.
	for _, x := range []*Writer{w, w2, w3} {
		if err := x.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	res, err = pr.Prune(ctx, keepRefs(refsW, refs2, refs3))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("prune after writers: %+v", res)
	rd := f.open(t, f.opts(true))
	for name, c := range map[string]struct {
		refs []ChunkRef
		data []byte
	}{"W": {refsW, dataW}, "W2": {refs2, data2}, "W3": {refs3, old}} {
		if got := readAll(t, rd, c.refs); !bytes.Equal(got, c.data) {
			t.Errorf("%s does not read back after the prunes", name)
		}
	}
	_ = refsOld

	// Only W2 kept: W's and W3's packs go, condemned by one prune and deleted by the next (no
	// writer runs).
	for range 2 {
		if res, err = pr.Prune(ctx, keepRefs(refs2)); err != nil {
			t.Fatal(err)
		}
		t.Logf("prune keeping W2: %+v", res)
	}
	rd = f.open(t, f.opts(true))
	stored, used := packsOf(t, f, rd, refs2)
	if len(stored) != len(used) || res.Waiting != 0 {
		t.Errorf("last prune %+v: %d packs stored, %d used by the kept backup", res, len(stored), len(used))
	}
	if got := readAll(t, rd, refs2); !bytes.Equal(got, data2) {
		t.Error("W2 does not read back")
	}
}

// TestPruneDeadWriter: packs a writer uploaded and never indexed are deleted once its lock is
// stale, not before.
func TestPruneDeadWriter(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, false)
	f.init(t)
	now := time.Now()
	o := f.opts(true)
	o.Now = func() time.Time { return now }
	w, err := f.open(t, o).NewWriter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(ctx, bytes.NewReader(randomData(13, 4<<20))); err != nil {
		t.Fatal(err)
	}
	// The writer dies: its packs are uploaded, it never flushes nor releases its lock.
	w.send(ctx)
	close(w.batches)
	w.wg.Wait()
	w.flushed = true

	pr := f.open(t, o)
	res, err := pr.Prune(ctx, keepRefs())
	if err != nil || res.Deleted != 0 {
		t.Fatalf("prune with the writer's lock fresh: %v %+v, want nothing deleted", err, res)
	}
	now = now.Add(time.Hour) // the lock is stale
	res, err = pr.Prune(ctx, keepRefs())
	if err != nil || res.DeletedUnindexed == 0 {
		t.Fatalf("prune with the writer's lock stale: %v %+v, want its packs deleted", err, res)
	}
	stored, _ := packsOf(t, f, pr, nil)
	if len(stored) != 0 {
		t.Errorf("%d packs left", len(stored))
	}
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, true)
	if _, err := Open(ctx, f.store, f.opts(true)); !errors.Is(err, ErrNotRepo) {
		t.Errorf("open of no repository: %v", err)
	}
	f.init(t)
	if _, err := Init(ctx, f.store, f.opts(true)); !errors.Is(err, storage.ErrExists) {
		t.Errorf("second init: %v, want ErrExists", err)
	}
	other, _ := age.GenerateX25519Identity()
	for _, tc := range []struct {
		name string
		o    Options
		bad  bool
	}{
		{"other recipients", Options{Recipients: []string{other.Recipient().String()}}, true},
		{"malformed recipient", Options{Recipients: []string{"age1nope"}}, true},
		{"wrong identity", Options{Identities: []age.Identity{other}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Open(ctx, f.store, tc.o)
			if err == nil || badinput.Is(err) != tc.bad {
				t.Errorf("open: %v, want bad input %v", err, tc.bad)
			}
		})
	}
	// A writer must name the recipients: those of the config could be anyone's.
	key := f.open(t, f.opts(true)).WriterKey()
	if _, err := f.open(t, Options{Key: key}).NewWriter(ctx); !badinput.Is(err) {
		t.Errorf("writer without recipients: %v, want bad input", err)
	}
	// Prune without the identity is refused.
	if _, err := f.open(t, f.opts(false)).Prune(ctx, keepRefs()); !errors.Is(err, ErrNoIdentity) {
		t.Errorf("prune without identity: %v", err)
	}
}

// TestWriterIndexesAsItGoes: a writer indexes its packs every IndexEvery chunks while it writes,
// not all at its end, and forgets them as pending; what it wrote reads back, and a second write
// of the same data dedupes against every part of it.
func TestWriterIndexesAsItGoes(t *testing.T) {
	for _, encrypted := range []bool{false, true} {
		t.Run(fmt.Sprintf("encrypted=%v", encrypted), func(t *testing.T) {
			f := newFixture(t, encrypted)
			f.chunkBits, f.packSize = 12, 32<<10
			f.init(t)
			o := f.opts(true)
			o.IndexEvery = 8
			r := f.open(t, o)
			data := randomData(5, 1<<20)
			ctx := context.Background()
			w, err := r.NewWriter(ctx)
			if err != nil {
				t.Fatal(err)
			}
			refs, err := w.Write(ctx, bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			// Before Flush: whatever is not in the last batches of packs is indexed already.
			objects := func() int {
				n := 0
				f.store.List(ctx, r.Prefix()+indexDir, func(storage.ObjectInfo) error { n++; return nil })
				return n
			}
			for deadline := time.Now().Add(10 * time.Second); objects() == 0 && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
			}
			if objects() == 0 {
				t.Fatalf("no index object while %d chunks were written", len(refs))
			}
			if err := w.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if len(refs) < 4*o.IndexEvery || objects() < 2 || len(w.pending) != 0 {
				t.Fatalf("%d chunks in %d index objects, %d still pending; want several objects, none pending", len(refs), objects(), len(w.pending))
			}
			reader := f.open(t, f.opts(true))
			if got := readAll(t, reader, refs); !bytes.Equal(got, data) {
				t.Fatal("the write does not read back")
			}
			if _, st := write(t, reader, data); st.NewBytes != 0 {
				t.Errorf("the same data again: %d new bytes, want none", st.NewBytes)
			}
		})
	}
}

// TestReaderAcrossCalls: one Reader reads streams of many packs in any order, again and again,
// each checked: a pack read to its last chunk is closed, a chunk behind a pack's reader opens the
// pack again.
func TestReaderAcrossCalls(t *testing.T) {
	for _, enc := range []bool{false, true} {
		t.Run(fmt.Sprintf("encrypted=%v", enc), func(t *testing.T) {
			f := newFixture(t, enc)
			r := f.init(t)
			var data [][]byte
			var refs [][]ChunkRef
			for i := range maxOpenPacks + 2 { // a writer each: each stream in packs of its own
				// Longer than the largest chunk, so every pack has two chunks or more wherever the
				// random polynomial cuts: a pack of one chunk is closed by reading its first.
				d := randomData(uint64(100+i), 600<<10)
				rs, _ := write(t, r, d)
				data, refs = append(data, d), append(refs, rs)
			}
			rd := f.open(t, f.opts(true)).NewReader()
			defer rd.Close()
			for _, i := range []int{0, 1, 0, 2, 3, 4, 5, 0, 5, 5, 1} {
				var b bytes.Buffer
				if err := rd.Read(context.Background(), refs[i], &b); err != nil {
					t.Fatalf("stream %d: %v", i, err)
				}
				if !bytes.Equal(b.Bytes(), data[i]) {
					t.Fatalf("stream %d: read %d bytes, want %d equal ones", i, b.Len(), len(data[i]))
				}
				if len(rd.open) != 0 {
					t.Fatalf("%d packs open after reading every chunk of them, want none", len(rd.open))
				}
			}
			for i := range refs { // each stream's first chunk: its pack stays open, up to maxOpenPacks
				var b bytes.Buffer
				if err := rd.Read(context.Background(), refs[i][:1], &b); err != nil || !bytes.Equal(b.Bytes(), data[i][:refs[i][0].Size]) {
					t.Fatalf("first chunk of stream %d: %v", i, err)
				}
				if want := min(i+1, maxOpenPacks); len(rd.open) != want {
					t.Fatalf("%d packs open, want %d", len(rd.open), want)
				}
			}
		})
	}
}

// TestPackChunksBoundsPacks: a pack is closed at PackChunks chunks however small they are, so that
// a writer of a million small files indexes (and forgets as pending) as it goes; what it wrote
// reads back.
func TestPackChunksBoundsPacks(t *testing.T) {
	for _, encrypted := range []bool{false, true} {
		t.Run(fmt.Sprintf("encrypted=%v", encrypted), func(t *testing.T) {
			f := newFixture(t, encrypted)
			f.init(t)
			o := f.opts(true)
			o.PackChunks, o.IndexEvery = 50, 200
			r := f.open(t, o)
			ctx := context.Background()
			w, err := r.NewWriter(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var files [][]ChunkRef
			for i := range 1000 {
				refs, err := w.Write(ctx, strings.NewReader(fmt.Sprintf("small file %d\n", i)))
				if err != nil {
					t.Fatal(err)
				}
				files = append(files, refs)
			}
			if err := w.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if st := w.Stats(); st.Packs < 1000/o.PackChunks {
				t.Errorf("%d packs for 1000 chunks, want at least %d", st.Packs, 1000/o.PackChunks)
			}
			l, err := f.open(t, f.opts(true)).load(ctx, true)
			if err != nil {
				t.Fatal(err)
			}
			for pack, blobs := range l.packs {
				if len(blobs) > o.PackChunks {
					t.Errorf("pack %s holds %d chunks, want at most %d", pack, len(blobs), o.PackChunks)
				}
			}
			for i, refs := range files {
				if got, want := string(readAll(t, r, refs)), fmt.Sprintf("small file %d\n", i); got != want {
					t.Fatalf("file %d reads back as %q", i, got)
				}
			}
		})
	}
}

// TestIndexRefusesImpossibleBlobs: an index object whose chunk lies outside what a pack can hold
// is corrupt; the repository does not open on it.
func TestIndexRefusesImpossibleBlobs(t *testing.T) {
	for _, blob := range []indexBlob{{Offset: -1, Length: 10, Size: 10}, {Offset: 4, Length: 1 << 33, Size: 10}, {Offset: 4, Length: 10, Size: -5}} {
		f := newFixture(t, false)
		r := f.init(t)
		ctx := context.Background()
		blob.ID = sha256.Sum256([]byte("x"))
		if _, err := r.writeIndex(ctx, nil, []indexPack{{Pack: hex.EncodeToString(blob.ID[:]), Blobs: []indexBlob{blob}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(ctx, f.store, f.opts(true)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("offset %d, length %d, size %d: Open: %v, want corrupt", blob.Offset, blob.Length, blob.Size, err)
		}
	}
}

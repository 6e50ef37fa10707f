package repo

import (
	"bufio"
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/ferrykube/ferry/storage"
	"github.com/klauspost/compress/zstd"
)

// ID names a chunk: the SHA-256 of its bytes, or in an encrypted repository their HMAC-SHA-256
// under the chunk-ID key of the namespace it was written in.
type ID [32]byte

func (id ID) String() string { return hex.EncodeToString(id[:]) }

// MarshalText writes the ID in hexadecimal.
func (id ID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

// UnmarshalText reads an ID in hexadecimal.
func (id *ID) UnmarshalText(b []byte) error {
	if hex.DecodedLen(len(b)) != len(id) {
		return fmt.Errorf("chunk ID %q: want %d hex digits", b, 2*len(id))
	}
	_, err := hex.Decode(id[:], b)
	return err
}

// ChunkRef is one chunk of a written stream, in order: what a backup records to read it back.
type ChunkRef struct {
	ID   ID  `json:"id"`
	Size int `json:"size"`
}

// slot is where a chunk is stored, as the loaded index keeps it: a backup of a million small files
// holds a million of them, and with a pack's name and a namespace in each the index was most of
// its memory. Packs and namespaces are numbers into the repository's tables of their names.
type slot struct {
	off    int64
	pack   uint32
	length uint32
	size   uint32
	key    uint16
}

// names interns the names of packs or namespaces as numbers.
type names[N uint16 | uint32] struct {
	byName map[string]N
	list   []string
}

func newNames[N uint16 | uint32]() *names[N] { return &names[N]{byName: map[string]N{}} }

// number of name, added when new; an error when the table is full.
func (t *names[N]) number(name string) (N, error) {
	if n, ok := t.byName[name]; ok {
		return n, nil
	}
	n := N(len(t.list))
	if int(n) != len(t.list) {
		return 0, fmt.Errorf("more than %d names", len(t.list))
	}
	t.byName[name] = n
	t.list = append(t.list, name)
	return n, nil
}

// table is the loaded index with the names its slots number.
type table struct {
	// slots are where each chunk is; of a write-only repository, packOf holds its pack alone.
	slots  *slotMap[slot]
	packOf *slotMap[uint32]
	packs  *names[uint32]
	keys   *names[uint16]
}

func newTable(writeOnly bool) table {
	t := table{packs: newNames[uint32](), keys: newNames[uint16]()}
	if writeOnly {
		t.packOf = &slotMap[uint32]{}
	} else {
		t.slots = &slotMap[slot]{}
	}
	return t
}

// get is the chunk's slot; of a write-only repository, only its pack is set.
func (t table) get(id ID) (slot, bool) {
	if t.packOf != nil {
		p, ok := t.packOf.get(id)
		return slot{pack: p}, ok
	}
	return t.slots.get(id)
}

func (t table) set(id ID, s slot) {
	if t.packOf != nil {
		t.packOf.set(id, s.pack)
		return
	}
	t.slots.set(id, s)
}

func (t table) len() int {
	if t.packOf != nil {
		return t.packOf.len()
	}
	return t.slots.len()
}

// slotOf makes the slot of an entry, naming its pack and namespace in t.
func (t table) slotOf(e entry) (slot, error) {
	pack, err := t.packs.number(e.pack)
	if err != nil {
		return slot{}, fmt.Errorf("index of packs: %w", err)
	}
	key, err := t.keys.number(e.key)
	if err != nil {
		return slot{}, fmt.Errorf("index of namespaces: %w", err)
	}
	return slot{off: e.off, pack: pack, length: uint32(e.length), size: uint32(e.size), key: key}, nil
}

func (t table) entryOf(s slot) entry {
	return entry{pack: t.packs.list[s.pack], off: s.off, length: int(s.length), size: int(s.size), key: t.keys.list[s.key]}
}

// entry is where a chunk is stored.
type entry struct {
	pack   string // hex SHA-256 of the pack
	off    int64  // of the blob's bytes in the pack (after its length prefix)
	length int    // of the blob as stored
	size   int    // of the chunk's plain bytes
	key    string // the namespace: the key the ID is keyed with (plainKeyID unencrypted)
}

// indexFile is one index object, before compression and encryption.
type indexFile struct {
	Version int         `json:"v"`
	Packs   []indexPack `json:"packs"`
}

type indexPack struct {
	Pack  string      `json:"pack"`
	Blobs []indexBlob `json:"blobs"`
}

type indexBlob struct {
	ID     ID    `json:"id"`
	Offset int64 `json:"off"`
	Length int   `json:"len"`
	Size   int   `json:"size"`
}

// chunkID computes a chunk's ID in a namespace (k nil: unencrypted).
func chunkID(k *nsKey, data []byte) ID {
	if k == nil {
		return sha256.Sum256(data)
	}
	m := hmac.New(sha256.New, k.idKey)
	m.Write(data)
	var id ID
	m.Sum(id[:0])
	return id
}

func (r *Repo) keyName(k *nsKey) string {
	if k == nil {
		return plainKeyID
	}
	return k.id
}

// sealIndex compresses an index object and, in an encrypted repository, seals it with the
// namespace's index key: a writer with the chunk-ID key reads it, nobody else does.
func (r *Repo) sealIndex(k *nsKey, f indexFile) ([]byte, error) {
	var compressed bytes.Buffer
	// Its own encoder, of a small window: the JSON of 65,536 blobs is about 7 MB, and encoded
	// whole, then compressed in one call, it took 40 MB of a backup's heap.
	zw, err := zstd.NewWriter(&compressed, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(1<<20))
	if err != nil {
		return nil, err
	}
	if err := writeIndexJSON(zw, f); err != nil {
		zw.Close()
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	data := compressed.Bytes()
	if k == nil {
		return data, nil
	}
	aead, err := newGCM(k.indexKey)
	if err != nil {
		return nil, err
	}
	nonce := randomBytes(aead.NonceSize())
	return aead.Seal(nonce, nonce, data, []byte("ferry index "+k.id)), nil
}

// writeIndexJSON writes f as json.Marshal would, but for whitespace, a blob at a time.
func writeIndexJSON(w io.Writer, f indexFile) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	enc := json.NewEncoder(bw)
	// list writes n elements as a JSON array (null when nil, as Marshal writes a nil slice).
	list := func(null bool, n int, each func(int) error) error {
		if null {
			bw.WriteString("null")
			return nil
		}
		bw.WriteByte('[')
		for i := range n {
			if i > 0 {
				bw.WriteByte(',')
			}
			if err := each(i); err != nil {
				return err
			}
		}
		bw.WriteByte(']')
		return nil
	}
	fmt.Fprintf(bw, `{"v":%d,"packs":`, f.Version)
	err := list(f.Packs == nil, len(f.Packs), func(i int) error {
		p := f.Packs[i]
		bw.WriteString(`{"pack":`)
		if err := enc.Encode(p.Pack); err != nil {
			return err
		}
		bw.WriteString(`,"blobs":`)
		if err := list(p.Blobs == nil, len(p.Blobs), func(j int) error { return enc.Encode(p.Blobs[j]) }); err != nil {
			return err
		}
		return bw.WriteByte('}')
	})
	if err != nil {
		return err
	}
	bw.WriteByte('}')
	return bw.Flush()
}

func (r *Repo) openIndex(k *nsKey, name string, data []byte) (indexFile, error) {
	var f indexFile
	if k != nil {
		aead, err := newGCM(k.indexKey)
		if err != nil {
			return f, err
		}
		ns := aead.NonceSize()
		if len(data) < ns {
			return f, fmt.Errorf("index %s: too short: %w", name, ErrCorrupt)
		}
		if data, err = aead.Open(nil, data[:ns], data[ns:], []byte("ferry index "+k.id)); err != nil {
			return f, fmt.Errorf("index %s: %v: %w", name, err, ErrCorrupt)
		}
	}
	plain, err := r.dec.DecodeAll(data, nil)
	if err != nil {
		return f, fmt.Errorf("index %s: %v: %w", name, err, ErrCorrupt)
	}
	if err := json.Unmarshal(plain, &f); err != nil || f.Version != 1 {
		return f, fmt.Errorf("index %s: not an index of version 1: %w", name, ErrCorrupt)
	}
	return f, nil
}

func newGCM(key []byte) (cipher.AEAD, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

// writeIndex stores an index object of a namespace under a random name.
func (r *Repo) writeIndex(ctx context.Context, k *nsKey, packs []indexPack) (string, error) {
	data, err := r.sealIndex(k, indexFile{Version: 1, Packs: packs})
	if err != nil {
		return "", fmt.Errorf("seal index: %w", err)
	}
	name := r.opts.Prefix + indexDir + r.keyName(k) + "/" + randomHex(16)
	if err := r.store.Put(ctx, name, bytes.NewReader(data)); err != nil {
		return "", fmt.Errorf("write index %s: %w", name, err)
	}
	return name, nil
}

// loaded is what reload read: the index objects by namespace and every pack they name.
type loaded struct {
	objects    map[string][]string // namespace → index object keys read
	packs      map[string][]packBlob
	unreadable int // index objects of namespaces whose key is not held
}

type packBlob struct {
	id ID
	e  entry
}

// reload reads the condemned packs, then every index object of the keys held, and replaces the
// in-memory index. The order matters for prune safety: a writer that sees an index entry has also
// seen whether its pack was condemned before it started.
func (r *Repo) reload(ctx context.Context) error {
	_, err := r.load(ctx, false)
	return err
}

// load is reload, returning what it read; with withPacks, every pack's blobs too (a prune's and a
// check's: a million chunks' worth that a writer or a reader does not need).
func (r *Repo) load(ctx context.Context, withPacks bool) (*loaded, error) {
	cond, err := r.readCondemned(ctx)
	if err != nil {
		return nil, err
	}
	condemned := map[string]bool{}
	for _, c := range cond {
		for _, p := range c.Packs {
			condemned[p] = true
		}
	}
	r.mu.RLock()
	keys := make(map[string]*nsKey, len(r.keys))
	for id, k := range r.keys {
		keys[id] = k
	}
	r.mu.RUnlock()

	var names []string
	if err := r.store.List(ctx, r.opts.Prefix+indexDir, func(o storage.ObjectInfo) error {
		names = append(names, o.Key)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("list index: %w", err)
	}
	l := &loaded{objects: map[string][]string{}, packs: map[string][]packBlob{}}
	index, ends := newTable(r.opts.WriteOnly), map[string]int64{}
	for _, name := range names {
		ns, _, _ := strings.Cut(strings.TrimPrefix(name, r.opts.Prefix+indexDir), "/")
		var k *nsKey
		if r.cfg.Encrypted {
			if k = keys[ns]; k == nil {
				l.unreadable++ // another writer's namespace: read only with the identity
				continue
			}
		} else if ns != plainKeyID {
			continue
		}
		data, err := r.getAll(ctx, name)
		if err != nil {
			return nil, err
		}
		f, err := r.openIndex(k, name, data)
		if err != nil {
			return nil, err
		}
		l.objects[ns] = append(l.objects[ns], name)
		for _, p := range f.Packs {
			for _, b := range p.Blobs {
				if b.Offset < 0 || b.Length < 0 || b.Size < 0 || b.Length > math.MaxUint32 || b.Size > math.MaxUint32 {
					return nil, fmt.Errorf("index %s: chunk %s: offset %d, length %d, size %d: %w", name, b.ID, b.Offset, b.Length, b.Size, ErrCorrupt)
				}
				e := entry{pack: p.Pack, off: b.Offset, length: b.Length, size: b.Size, key: ns}
				if withPacks {
					l.packs[p.Pack] = append(l.packs[p.Pack], packBlob{b.ID, e})
				}
				ends[p.Pack] = max(ends[p.Pack], b.Offset+int64(b.Length))
				if old, ok := index.get(b.ID); !ok || (condemned[index.packs.list[old.pack]] && !condemned[e.pack]) {
					s, err := index.slotOf(e)
					if err != nil {
						return nil, err
					}
					index.set(b.ID, s)
				}
			}
		}
	}
	r.mu.Lock()
	r.index, r.packEnds, r.condemned = index, ends, condemned
	r.mu.Unlock()
	return l, nil
}

func (r *Repo) getAll(ctx context.Context, key string) ([]byte, error) {
	rc, err := r.store.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	return data, nil
}

// lookup returns where a chunk is stored.
func (r *Repo) lookup(id ID) (entry, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.opts.WriteOnly {
		return entry{}, false // Read and Prune refuse such a repository first
	}
	s, ok := r.index.get(id)
	if !ok {
		return entry{}, false
	}
	return r.index.entryOf(s), true
}

// PackOf names the pack the loaded index places a chunk in (its name in packs/<hh>/).
func (r *Repo) PackOf(id ID) (string, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	s, ok := r.index.get(id) // a write-only index keeps the pack too
	if !ok {
		return "", false
	}
	return r.index.packs.list[s.pack], true
}

// dedupable reports whether a writer may reference the stored chunk instead of uploading it: it is
// in the namespace's index and its pack is not condemned.
func (r *Repo) dedupable(id ID) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	s, ok := r.index.get(id)
	return ok && !r.condemned[r.index.packs.list[s.pack]]
}

// isCondemned reports whether a prune condemned the pack, as last loaded.
func (r *Repo) isCondemned(pack string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.condemned[pack]
}

func (r *Repo) addEntries(ns string, p indexPack) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, b := range p.Blobs {
		s, err := r.index.slotOf(entry{pack: p.Pack, off: b.Offset, length: b.Length, size: b.Size, key: ns})
		if err != nil {
			return err
		}
		r.index.set(b.ID, s)
		r.packEnds[p.Pack] = max(r.packEnds[p.Pack], b.Offset+int64(b.Length))
	}
	return nil
}

// packEnd is where the last blob the index holds of a pack ends.
func (r *Repo) packEnd(pack string) int64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.packEnds[pack]
}

// Len is the number of chunks in the loaded index.
func (r *Repo) Len() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.index.len()
}

// Package repo stores file data content-addressed and deduplicated on a storage.Backend: data is
// cut into content-defined chunks (github.com/restic/chunker), each chunk stored once under its ID,
// compressed with zstd when that shrinks it, encrypted to the repository's age recipients when it
// is encrypted, and packed into pack files of a few MiB so that the store sees few big writes. An
// index (chunk ID → pack, offset, length) is stored as objects of its own and merged at open.
//
// The layout and formats are in docs/format.md ("Chunk repository"). In short:
//
//	<prefix>config                     the repository's config (plain JSON, written last by Init)
//	<prefix>keys/<key-id>              a chunk-ID key, age-encrypted to the recipients (encrypted repos)
//	<prefix>index/<key-id>/<random>    index objects of one key's namespace
//	<prefix>packs/<hh>/<sha256>        pack files, named by the SHA-256 of their bytes
//	<prefix>locks/<random>.json        a writer's lock; locks/prune.json the prune's
//	<prefix>condemned/<time>-<random>.json  packs a prune found unused, deleted by a later sweep
//
// A writer needs the age recipients and a chunk-ID key, never the age identity: see Options.Key.
package repo

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"filippo.io/age"
	"github.com/klauspost/compress/zstd"
	"github.com/restic/chunker"

	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/storage"
)

// DefaultPrefix is where a repository lives in a storage: under metadata/, one of the top-level
// folders Velero allows beside its own.
const DefaultPrefix = "metadata/ferry/repo/"

// Version is the config version this package writes and reads.
const Version = 1

const (
	configFile   = "config"
	keysDir      = "keys/"
	indexDir     = "index/"
	packsDir     = "packs/"
	locksDir     = "locks/"
	condemnedDir = "condemned/"
	plainKeyID   = "plain" // the namespace of an unencrypted repository's index

	defaultPackSize = 16 << 20
	defaultUploads  = 4
	keySize         = 32
)

var (
	// ErrCorrupt matches errors about stored data that fails its check: a chunk whose ID does not
	// match its bytes, a pack whose name is not its hash, an undecodable index.
	ErrCorrupt = errors.New("repository data is corrupt")
	// ErrNoIdentity matches errors of reads of an encrypted repository opened without an age identity.
	ErrNoIdentity = errors.New("the repository is encrypted: reading it needs an age identity")
	// ErrWriteOnly is the error of a read, a check or a prune of a repository opened WriteOnly.
	ErrWriteOnly = errors.New("the repository was opened for writing only")
	// ErrNotRepo matches errors of Open when the storage holds no repository at the prefix.
	ErrNotRepo = errors.New("no chunk repository")
	// ErrUnknownChunk matches errors about a chunk the index does not hold.
	ErrUnknownChunk = errors.New("chunk not in the index")
	// ErrLocked matches errors of Prune when another prune holds the repository.
	ErrLocked = errors.New("repository is locked by another prune")
)

// Config is the repository's config, stored in clear: a writer without the age identity must read
// the chunker's polynomial and the recipients.
type Config struct {
	Version int    `json:"version"`
	ID      string `json:"id"`
	// Polynomial is the chunker's random polynomial. It is not secret (see docs/format.md).
	Polynomial  chunker.Pol `json:"chunkerPolynomial"`
	MinSize     uint        `json:"chunkMinSize"`
	MaxSize     uint        `json:"chunkMaxSize"`
	AverageBits int         `json:"chunkAverageBits"`
	// Encrypted is set when chunk IDs are keyed and data is encrypted to Recipients.
	Encrypted  bool     `json:"encrypted"`
	Recipients []string `json:"recipients,omitempty"`
	// MainKey is the ID of the key Init made: those with the identity write in its namespace.
	MainKey string `json:"mainKey,omitempty"`
}

// Options open or create a repository.
type Options struct {
	// Prefix is where the repository lives in the storage; DefaultPrefix when empty.
	Prefix string
	// Recipients are age X25519 recipients. Init encrypts the repository when there are any; Open
	// refuses recipients other than the repository's, so that a writer never encrypts to a set an
	// attacker wrote into the config.
	Recipients []string
	// Identities read an encrypted repository (its keys, then its data).
	Identities []age.Identity
	// Key is a chunk-ID key handed to a writer that has no identity (Repo.WriterKey of a repository
	// opened with one): with it the writer dedupes against the key's namespace. Without Key and
	// without identities a writer of an encrypted repository makes a fresh key of its own, and
	// dedupes only against what it writes itself.
	Key []byte
	// ChunkAverageBits sets, at Init, the chunks' average size to 2^bits bytes (minimum half of it,
	// maximum 8 times); 20 (1 MiB, as restic) when zero. It is stored in the config: chunks of
	// another size would not dedupe.
	ChunkAverageBits int
	// PackSize is the size at which a pack is closed and uploaded; 16 MiB when zero.
	PackSize int
	// PackChunks is the number of chunks at which a pack is closed and uploaded, whatever its
	// size; 8,192 when zero. Until its pack is indexed a writer keeps each chunk's ID twice, and
	// small files compress well: a pack of 16 MiB held 400,000 files of 1 KiB.
	PackChunks int
	// Uploads bounds the packs built and uploaded at the same time; 4 when zero.
	Uploads int
	// IndexEvery is how many chunks a writer indexes at once, as it uploads their packs (an index
	// object each time); 65,536 when zero. A writer then never holds the index of all it wrote.
	IndexEvery int
	// WriteOnly opens the repository for writers alone (a backup's): its loaded index keeps each
	// chunk's pack, not where in it: about 42 bytes a chunk instead of 61. Read, Check and Prune
	// refuse it.
	WriteOnly bool
	// Now is the clock of locks and prune; time.Now when nil.
	Now func() time.Time
	// RefreshEvery is how often a writer renews its lock; 5 minutes when zero.
	RefreshEvery time.Duration
	// StaleAfter is how old a lock's last renewal may be before others ignore it; 30 minutes when zero.
	StaleAfter time.Duration
	// SkewMargin covers clocks of writers and prunes that differ; 10 minutes when zero, none when negative.
	SkewMargin time.Duration
	// RepackBelow is the share of a pack's bytes still used under which Prune repacks it; 0.5 when zero.
	RepackBelow float64
}

func (o *Options) defaults() {
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if !strings.HasSuffix(o.Prefix, "/") {
		o.Prefix += "/"
	}
	if o.PackSize <= 0 {
		o.PackSize = defaultPackSize
	}
	if o.PackChunks <= 0 {
		o.PackChunks = 8192
	}
	if o.Uploads <= 0 {
		o.Uploads = defaultUploads
	}
	if o.IndexEvery <= 0 {
		o.IndexEvery = 1 << 16
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.RefreshEvery <= 0 {
		o.RefreshEvery = 5 * time.Minute
	}
	if o.StaleAfter <= 0 {
		o.StaleAfter = 30 * time.Minute
	}
	if o.SkewMargin == 0 {
		o.SkewMargin = 10 * time.Minute
	} else if o.SkewMargin < 0 {
		o.SkewMargin = 0
	}
	if o.RepackBelow <= 0 {
		o.RepackBelow = 0.5
	}
}

// Repo is an open repository. Its methods may be called concurrently.
type Repo struct {
	store      storage.Backend
	opts       Options
	cfg        Config
	recipients []age.Recipient
	enc        *zstd.Encoder
	dec        *zstd.Decoder
	packBufs   sync.Pool // *bytes.Buffer of packs uploaded

	mu        sync.RWMutex
	keys      map[string]*nsKey // the keys this process holds, by key ID
	writeKey  *nsKey            // the namespace new chunks go to; nil until one is needed
	index     table
	packEnds  map[string]int64 // where each indexed pack's last blob ends: a Reader past it closes the pack
	condemned map[string]bool  // packs a prune marked for deletion: never deduped against
}

// nsKey is a chunk-ID key and what is derived from it.
type nsKey struct {
	id       string
	raw      []byte
	idKey    []byte // HMAC key of chunk IDs
	indexKey []byte // AES-256-GCM key of index objects
}

func deriveKey(raw []byte) *nsKey {
	d := func(label string) []byte {
		m := hmac.New(sha256.New, raw)
		m.Write([]byte("ferry repo " + label))
		return m.Sum(nil)
	}
	return &nsKey{id: hex.EncodeToString(d("key id"))[:16], raw: slices.Clone(raw), idKey: d("chunk id"), indexKey: d("index")}
}

// Init creates a repository: a random chunker polynomial, and for an encrypted one (Recipients set) a
// chunk-ID key stored encrypted to the recipients. The config is written last, with Create, so
// that of two Inits one wins and a half-made repository is never opened.
func Init(ctx context.Context, store storage.Backend, opts Options) (*Repo, error) {
	opts.defaults()
	recips, err := parseRecipients(opts.Recipients)
	if err != nil {
		return nil, err
	}
	pol, err := chunker.RandomPolynomial()
	if err != nil {
		return nil, fmt.Errorf("init repository: %w", err)
	}
	bits := opts.ChunkAverageBits
	if bits == 0 {
		bits = 20
	}
	if bits < 12 || bits > 24 {
		return nil, badinput.Errorf("chunk average bits %d: want 12 to 24", bits)
	}
	cfg := Config{Version: Version, ID: randomHex(16), Polynomial: pol, MinSize: 1 << (bits - 1), MaxSize: 1 << (bits + 3), AverageBits: bits}
	r := newRepo(store, opts, recips)
	if len(recips) > 0 {
		cfg.Encrypted, cfg.Recipients = true, slices.Clone(opts.Recipients)
		raw := opts.Key
		if raw == nil {
			raw = randomBytes(keySize)
		}
		k := deriveKey(raw)
		if err := r.storeKey(ctx, k); err != nil {
			return nil, err
		}
		cfg.MainKey = k.id
		r.keys[k.id], r.writeKey = k, k
	}
	data, _ := json.MarshalIndent(cfg, "", "  ")
	if err := store.Create(ctx, opts.Prefix+configFile, bytes.NewReader(data)); err != nil {
		return nil, fmt.Errorf("init repository at %s%s: %w", store, opts.Prefix, err)
	}
	r.cfg = cfg
	return r, nil
}

func newRepo(store storage.Backend, opts Options, recips []age.Recipient) *Repo {
	enc, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	dec, _ := zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(64<<20))
	return &Repo{store: store, opts: opts, recipients: recips, enc: enc, dec: dec,
		keys: map[string]*nsKey{}, index: newTable(opts.WriteOnly), packEnds: map[string]int64{}, condemned: map[string]bool{}}
}

// Open opens an existing repository and loads its index: every index object of the keys it holds.
func Open(ctx context.Context, store storage.Backend, opts Options) (*Repo, error) {
	opts.defaults()
	recips, err := parseRecipients(opts.Recipients)
	if err != nil {
		return nil, err
	}
	cfg, err := readConfig(ctx, store, opts.Prefix)
	if err != nil {
		return nil, err
	}
	if len(opts.Recipients) > 0 && !sameSet(opts.Recipients, cfg.Recipients) {
		return nil, badinput.Errorf("repository %s%s: the recipients given are not the repository's (%d recorded): refusing to write to other keys", store, opts.Prefix, len(cfg.Recipients))
	}
	if len(recips) == 0 && cfg.Encrypted && holdsRecipient(opts.Identities, cfg.Recipients) {
		// A holder of the identity (a prune's repack) may write to the config's recipients: one of
		// them is its own, so the config is not someone else's. Anyone else must name them.
		if recips, err = parseRecipients(cfg.Recipients); err != nil {
			return nil, fmt.Errorf("repository %s%s: config: %w", store, opts.Prefix, err)
		}
	}
	r := newRepo(store, opts, recips)
	r.cfg = cfg
	if cfg.Encrypted {
		if len(opts.Identities) > 0 {
			if err := r.loadKeys(ctx); err != nil {
				return nil, err
			}
			r.writeKey = r.keys[cfg.MainKey]
		}
		if opts.Key != nil {
			k := deriveKey(opts.Key)
			r.keys[k.id], r.writeKey = k, k
		}
	}
	if err := r.reload(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

func readConfig(ctx context.Context, store storage.Reader, prefix string) (Config, error) {
	var cfg Config
	rc, err := store.Get(ctx, prefix+configFile)
	if errors.Is(err, storage.ErrNotExist) {
		return cfg, fmt.Errorf("%s%s: %w", prefix, configFile, ErrNotRepo)
	}
	if err != nil {
		return cfg, fmt.Errorf("read repository config: %w", err)
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, 1<<20))
	if err != nil {
		return cfg, fmt.Errorf("read %s%s: %w", prefix, configFile, err)
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return cfg, badinput.Errorf("%s%s: %v", prefix, configFile, err)
	}
	switch {
	case cfg.Version != Version:
		return cfg, badinput.Errorf("%s%s: version %d, this ferry reads version %d", prefix, configFile, cfg.Version, Version)
	case cfg.Polynomial == 0 || !cfg.Polynomial.Irreducible():
		return cfg, badinput.Errorf("%s%s: chunkerPolynomial is not an irreducible polynomial", prefix, configFile)
	case cfg.MinSize == 0 || cfg.MaxSize <= cfg.MinSize || cfg.AverageBits < 12 || cfg.AverageBits > 24:
		return cfg, badinput.Errorf("%s%s: chunk sizes out of range", prefix, configFile)
	case cfg.Encrypted && (len(cfg.Recipients) == 0 || cfg.MainKey == ""):
		return cfg, badinput.Errorf("%s%s: encrypted but no recipients or main key", prefix, configFile)
	}
	return cfg, nil
}

// Config returns the repository's config.
func (r *Repo) Config() Config { return r.cfg }

// WriterKey returns the chunk-ID key new chunks are written under, for a writer that will run
// without the age identity (a schedule's job): with it that writer dedupes against this namespace.
// It reveals no data, but whoever holds it can test whether a known file is stored. Nil for an
// unencrypted repository, or when no key is held yet.
func (r *Repo) WriterKey() []byte {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.writeKey == nil {
		return nil
	}
	return slices.Clone(r.writeKey.raw)
}

// storeKey stores a key encrypted to the recipients, unless a key of that ID is stored already.
func (r *Repo) storeKey(ctx context.Context, k *nsKey) error {
	var buf bytes.Buffer
	w, err := age.Encrypt(&buf, r.recipients...)
	if err != nil {
		return fmt.Errorf("encrypt key %s: %w", k.id, err)
	}
	w.Write(k.raw)
	if err := w.Close(); err != nil {
		return fmt.Errorf("encrypt key %s: %w", k.id, err)
	}
	err = r.store.Create(ctx, r.opts.Prefix+keysDir+k.id, &buf)
	if err != nil && !errors.Is(err, storage.ErrExists) {
		return fmt.Errorf("store key %s: %w", k.id, err)
	}
	return nil
}

// loadKeys decrypts every stored key with the identities. A key that is not what its name says is
// refused: the name is derived from the key.
func (r *Repo) loadKeys(ctx context.Context) error {
	var names []string
	if err := r.store.List(ctx, r.opts.Prefix+keysDir, func(o storage.ObjectInfo) error {
		names = append(names, o.Key)
		return nil
	}); err != nil {
		return fmt.Errorf("list keys: %w", err)
	}
	for _, name := range names {
		raw, err := r.readKey(ctx, name)
		if err != nil {
			return err
		}
		k := deriveKey(raw)
		if r.opts.Prefix+keysDir+k.id != name {
			return fmt.Errorf("key %s: its content is key %s: %w", name, k.id, ErrCorrupt)
		}
		r.mu.Lock()
		r.keys[k.id] = k
		r.mu.Unlock()
	}
	if r.keys[r.cfg.MainKey] == nil {
		return fmt.Errorf("repository's main key %s: %w", r.cfg.MainKey, ErrCorrupt)
	}
	return nil
}

func (r *Repo) readKey(ctx context.Context, name string) ([]byte, error) {
	rc, err := r.store.Get(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("read key %s: %w", name, err)
	}
	defer rc.Close()
	dr, err := age.Decrypt(io.LimitReader(rc, 64<<10), r.opts.Identities...)
	if err != nil {
		return nil, badinput.Errorf("key %s: %v (wrong identity?)", name, err)
	}
	raw, err := io.ReadAll(io.LimitReader(dr, keySize+1))
	if err != nil || len(raw) != keySize {
		return nil, fmt.Errorf("key %s: not a %d byte key: %w", name, keySize, ErrCorrupt)
	}
	return raw, nil
}

// ensureWriteKey gives a writer a namespace: the one held, or for an encrypted repository opened
// with neither identity nor key a fresh key of its own, stored encrypted to the recipients.
func (r *Repo) ensureWriteKey(ctx context.Context) (*nsKey, error) {
	if !r.cfg.Encrypted {
		return nil, nil
	}
	if len(r.recipients) == 0 {
		return nil, badinput.Errorf("repository %s%s is encrypted: writing to it needs its age recipients", r.store, r.opts.Prefix)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.writeKey != nil {
		return r.writeKey, nil
	}
	k := deriveKey(randomBytes(keySize))
	if err := r.storeKey(ctx, k); err != nil {
		return nil, err
	}
	r.keys[k.id], r.writeKey = k, k
	return k, nil
}

func parseRecipients(in []string) ([]age.Recipient, error) {
	var out []age.Recipient
	for _, s := range in {
		rc, err := age.ParseX25519Recipient(s)
		if err != nil {
			return nil, badinput.Errorf("age recipient %q: %v", s, err)
		}
		out = append(out, rc)
	}
	return out, nil
}

// holdsRecipient reports whether one of the identities is one of the recipients.
func holdsRecipient(ids []age.Identity, recipients []string) bool {
	for _, id := range ids {
		if x, ok := id.(*age.X25519Identity); ok && slices.Contains(recipients, x.Recipient().String()) {
			return true
		}
	}
	return false
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b) // never fails (crypto/rand panics instead)
	return b
}

func randomHex(n int) string { return hex.EncodeToString(randomBytes(n)) }

// Prefix is where the repository lives in its storage.
func (r *Repo) Prefix() string { return r.opts.Prefix }

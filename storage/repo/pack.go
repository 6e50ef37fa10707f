package repo

import (
	"bufio"
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	"filippo.io/age"
)

// A pack is
//
//	"FRYPACK1" | uint32 h | h bytes: the pack's data key age-encrypted to the recipients (h = 0 unencrypted)
//	then blobs, each: uint32 n | n bytes
//
// and in an encrypted pack each n is XORed with a mask (lengthMask) so that the pack shows no chunk
// sizes. A blob's bytes are flag|data (unencrypted) or nonce|AES-256-GCM(data key, flag|data, ID)
// (encrypted). flag 0: data is the chunk; flag 1: data is the chunk compressed with zstd. The
// lengths are little-endian. Pack names are the SHA-256 of the whole pack. A pack may end with a
// blob no index names, of fillerSize random bytes, unmasked: a writer's pack that would otherwise
// have the name of a condemned pack (Writer.upload). Readers go by the index and never read it.
const packMagic = "FRYPACK1"

const fillerSize = 16

const (
	flagRaw  = 0
	flagZstd = 1
)

// packer builds one pack in memory.
type packer struct {
	buf   *bytes.Buffer
	aead  cipher.AEAD  // nil unencrypted
	mask  cipher.Block // of the blobs' lengths; nil unencrypted
	blobs []indexBlob
}

// newMask derives the block cipher that masks blob lengths from a pack's data key.
func newMask(dk []byte) (cipher.Block, error) {
	mk := sha256.Sum256(append([]byte("ferry pack length "), dk...))
	return aes.NewCipher(mk[:])
}

// lengthMask is the mask of the length of the blob whose length field is at off.
func lengthMask(mask cipher.Block, off int64) uint32 {
	if mask == nil {
		return 0
	}
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:], uint64(off))
	mask.Encrypt(b[:], b[:])
	return binary.LittleEndian.Uint32(b[:])
}

// packBufStart is the capacity a pack's buffer starts with.
const packBufStart = 1 << 20

func (r *Repo) newPacker() (*packer, error) {
	p := &packer{}
	if b, ok := r.packBufs.Get().(*bytes.Buffer); ok {
		p.buf = b
	} else {
		// Grown as chunks come (see add): a pack of small files' chunks is far smaller than a
		// pack's most, and each worker's buffer of the most counted as heap, 24 MiB, whether used or not.
		p.buf = bytes.NewBuffer(make([]byte, 0, packBufStart))
	}
	p.buf.WriteString(packMagic)
	if !r.cfg.Encrypted {
		p.buf.Write([]byte{0, 0, 0, 0})
		return p, nil
	}
	dk := randomBytes(keySize)
	var head bytes.Buffer
	w, err := age.Encrypt(&head, r.recipients...)
	if err != nil {
		return nil, fmt.Errorf("encrypt pack key: %w", err)
	}
	w.Write(dk)
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("encrypt pack key: %w", err)
	}
	p.buf.Write(binary.LittleEndian.AppendUint32(nil, uint32(head.Len())))
	p.buf.Write(head.Bytes())
	if p.aead, err = newGCM(dk); err != nil {
		return nil, err
	}
	if p.mask, err = newMask(dk); err != nil {
		return nil, err
	}
	return p, nil
}

// add appends a chunk, compressed when that shrinks it.
// scratch holds a worker's buffers, reused from chunk to chunk.
func (r *Repo) add(p *packer, id ID, data []byte, scratch *[2][]byte) {
	stored := append(scratch[0][:0], flagRaw)
	if r.compressible(data, scratch) {
		stored[0] = flagZstd
		stored = r.enc.EncodeAll(data, stored)
	}
	if stored[0] == flagRaw || len(stored) >= len(data)+1 {
		stored = append(stored[:1], data...)
		stored[0] = flagRaw
	}
	scratch[0] = stored
	if p.aead != nil {
		nonce := append(scratch[1][:0], randomBytes(p.aead.NonceSize())...)
		stored = p.aead.Seal(nonce, nonce, stored, id[:])
		scratch[1] = stored
	}
	if need := p.buf.Len() + 4 + len(stored); need > p.buf.Cap() {
		// Doubled, as bytes.Buffer would, but never past what the largest pack needs.
		grown := bytes.NewBuffer(make([]byte, 0, max(min(2*p.buf.Cap(), r.opts.PackSize+int(r.cfg.MaxSize)+64), need)))
		grown.Write(p.buf.Bytes())
		p.buf = grown
	}
	p.buf.Write(binary.LittleEndian.AppendUint32(nil, uint32(len(stored))^lengthMask(p.mask, int64(p.buf.Len()))))
	p.blobs = append(p.blobs, indexBlob{ID: id, Offset: int64(p.buf.Len()), Length: len(stored), Size: len(data)})
	p.buf.Write(stored)
}

// compressible tries a sample of a large chunk first: data that is already compressed (media,
// archives, encrypted files) then costs no full compression attempt.
func (r *Repo) compressible(data []byte, scratch *[2][]byte) bool {
	const sample = 64 << 10
	if len(data) < 4*sample {
		return true
	}
	mid := data[len(data)/2 : len(data)/2+sample]
	out := r.enc.EncodeAll(mid, scratch[1][:0])
	scratch[1] = out
	return len(out) < sample*31/32
}

// finish names the pack by its hash.
func (p *packer) finish() (string, []byte) {
	sum := sha256.Sum256(p.buf.Bytes())
	return hex.EncodeToString(sum[:]), p.buf.Bytes()
}

func (r *Repo) packKey(name string) string {
	return r.opts.Prefix + packsDir + name[:2] + "/" + name
}

// packReader reads one pack from its start, forward only: storage offers whole objects, and the
// chunks of a file are mostly consecutive in a pack.
type packReader struct {
	name string
	rc   io.ReadCloser
	br   *bufio.Reader
	pos  int64
	aead cipher.AEAD
	mask cipher.Block
	bufs [3][]byte // reused: the stored blob, its decryption, its decompression
}

func (r *Repo) openPack(ctx context.Context, name string) (*packReader, error) {
	rc, err := r.store.Get(ctx, r.packKey(name))
	if err != nil {
		return nil, fmt.Errorf("pack %s: %w", name, err)
	}
	pr := &packReader{name: name, rc: rc, br: bufio.NewReaderSize(rc, 1<<20)}
	if err := r.readPackHead(pr); err != nil {
		rc.Close()
		return nil, err
	}
	return pr, nil
}

func (r *Repo) readPackHead(pr *packReader) error {
	head := make([]byte, len(packMagic)+4)
	if _, err := io.ReadFull(pr.br, head); err != nil || string(head[:len(packMagic)]) != packMagic {
		return fmt.Errorf("pack %s: no pack header: %w", pr.name, ErrCorrupt)
	}
	h := int64(binary.LittleEndian.Uint32(head[len(packMagic):]))
	pr.pos = int64(len(head)) + h
	if (h == 0) != !r.cfg.Encrypted || h > 64<<10 {
		return fmt.Errorf("pack %s: key header of %d bytes: %w", pr.name, h, ErrCorrupt)
	}
	if h == 0 {
		return nil
	}
	if len(r.opts.Identities) == 0 {
		return fmt.Errorf("pack %s: %w", pr.name, ErrNoIdentity)
	}
	dr, err := age.Decrypt(io.LimitReader(pr.br, h), r.opts.Identities...)
	if err != nil {
		return fmt.Errorf("pack %s: data key: %v: %w", pr.name, err, ErrCorrupt)
	}
	dk, err := io.ReadAll(io.LimitReader(dr, keySize+1))
	if err != nil || len(dk) != keySize {
		return fmt.Errorf("pack %s: data key: %w", pr.name, ErrCorrupt)
	}
	if pr.aead, err = newGCM(dk); err != nil {
		return err
	}
	pr.mask, err = newMask(dk)
	return err
}

// blob reads the blob at e (which must not be behind the reader's position) and decodes it.
func (r *Repo) blob(pr *packReader, id ID, e entry) ([]byte, error) {
	if e.off < pr.pos+4 {
		return nil, errors.New("blob behind the reader") // callers reopen; never reached
	}
	if _, err := pr.br.Discard(int(e.off - 4 - pr.pos)); err != nil {
		return nil, fmt.Errorf("chunk %s in pack %s: %v: %w", id, pr.name, err, ErrCorrupt)
	}
	if cap(pr.bufs[0]) < 4+e.length {
		pr.bufs[0] = make([]byte, 4+e.length)
	}
	stored := pr.bufs[0][:4+e.length]
	if _, err := io.ReadFull(pr.br, stored); err != nil {
		return nil, fmt.Errorf("chunk %s in pack %s: %v: %w", id, pr.name, err, ErrCorrupt)
	}
	pr.pos = e.off + int64(e.length)
	if int(binary.LittleEndian.Uint32(stored)^lengthMask(pr.mask, e.off-4)) != e.length {
		return nil, fmt.Errorf("chunk %s in pack %s: length differs from the index: %w", id, pr.name, ErrCorrupt)
	}
	return r.decodeBlob(pr.aead, pr.name, id, e, stored[4:], &pr.bufs)
}

// decodeBlob decrypts and decompresses a blob and checks that it is the chunk named id: its ID
// recomputed under its namespace's key, and its size. What it returns may be in bufs[1] or
// bufs[2], valid until the next call with the same bufs.
func (r *Repo) decodeBlob(aead cipher.AEAD, pack string, id ID, e entry, stored []byte, bufs *[3][]byte) ([]byte, error) {
	bad := func(what string) error {
		return fmt.Errorf("chunk %s in pack %s: %s: %w", id, pack, what, ErrCorrupt)
	}
	if aead != nil {
		ns := aead.NonceSize()
		if len(stored) < ns {
			return nil, bad("too short")
		}
		var err error
		if stored, err = aead.Open(bufs[1][:0], stored[:ns], stored[ns:], id[:]); err != nil {
			return nil, bad("does not decrypt (tampered or misplaced)")
		}
		bufs[1] = stored
	}
	if len(stored) == 0 {
		return nil, bad("empty")
	}
	data := stored[1:]
	switch stored[0] {
	case flagRaw:
	case flagZstd:
		var err error
		if data, err = r.dec.DecodeAll(data, bufs[2][:0]); err != nil {
			return nil, bad("does not decompress")
		}
		bufs[2] = data
	default:
		return nil, bad("unknown flag")
	}
	var k *nsKey
	if r.cfg.Encrypted {
		r.mu.RLock()
		k = r.keys[e.key]
		r.mu.RUnlock()
		if k == nil {
			return nil, bad("key " + e.key + " not held")
		}
	}
	if len(data) != e.size || chunkID(k, data) != id {
		return nil, bad("content does not match its ID")
	}
	return data, nil
}

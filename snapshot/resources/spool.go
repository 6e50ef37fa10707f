package resources

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"
	"sync"
)

// spool keeps the objects of a checked archive in a local file while a restore, a verify or a
// carry-back works through them, so that memory holds their keys only. The file is unlinked as
// soon as it is made (nothing is left behind, not even when ferry is killed), and each record is
// sealed with a key that lives only in this process: Secrets never rest on disk readable, and a
// record changed on disk fails to open rather than being applied.
type spool struct {
	f    *os.File
	aead cipher.AEAD

	mu  sync.Mutex
	off int64
	seq uint64
}

// spoolRef locates one sealed record of a spool.
type spoolRef struct {
	off int64
	n   int32
}

func newSpool() (*spool, error) {
	f, err := os.CreateTemp("", "ferry-objects-*")
	if err != nil {
		return nil, fmt.Errorf("a local spool for the backup's objects: %w", err)
	}
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, fmt.Errorf("a local spool for the backup's objects: %w", err)
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		f.Close()
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		f.Close()
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		f.Close()
		return nil, err
	}
	return &spool{f: f, aead: aead}, nil
}

// put appends one record.
func (s *spool) put(data []byte) (spoolRef, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	nonce := make([]byte, s.aead.NonceSize())
	binary.BigEndian.PutUint64(nonce, s.seq)
	s.seq++
	rec := s.aead.Seal(nonce, nonce, data, nil)
	if _, err := s.f.WriteAt(rec, s.off); err != nil {
		return spoolRef{}, fmt.Errorf("writing the local spool: %w", err)
	}
	ref := spoolRef{off: s.off, n: int32(len(rec))}
	s.off += int64(len(rec))
	return ref, nil
}

// get reads one record back; safe for concurrent use.
func (s *spool) get(ref spoolRef) ([]byte, error) {
	rec := make([]byte, ref.n)
	if _, err := s.f.ReadAt(rec, ref.off); err != nil {
		return nil, fmt.Errorf("reading the local spool: %w", err)
	}
	ns := s.aead.NonceSize()
	if len(rec) < ns {
		return nil, fmt.Errorf("reading the local spool: a record of %d bytes", len(rec))
	}
	data, err := s.aead.Open(rec[ns:ns], rec[:ns], rec[ns:], nil)
	if err != nil {
		return nil, fmt.Errorf("reading the local spool: a record does not authenticate: %w", err)
	}
	return data, nil
}

func (s *spool) close() error { return s.f.Close() }

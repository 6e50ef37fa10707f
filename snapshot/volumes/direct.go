package volumes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"

	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/storage"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/sync/errgroup"
)

// DirectRequest is what ferry hands a mover, as one JSON line on stdin, so that the mover uploads
// the volume to storage by itself: credentials never appear in the pod spec or its logs.
type DirectRequest struct {
	Access     storage.DirectAccess `json:"access"`
	Key        string               `json:"key"` // the full storage key, encryption suffix included
	Recipients []string             `json:"recipients,omitempty"`
}

// DirectResult is what the mover prints on stdout once the upload is complete.
type DirectResult struct {
	Files []snapshot.File `json:"files"`
	// Skipped lists the files left out: they changed while read, twice.
	Skipped []SkippedFile `json:"skipped,omitempty"`
	Bytes   int64         `json:"bytes"`  // stored
	SHA256  string        `json:"sha256"` // of the stored bytes
}

// PackDirect runs in the mover pod (ferry mover pack --direct): it packs dir, compresses (and
// encrypts) the stream and uploads it where req says.
func PackDirect(ctx context.Context, dir string, req DirectRequest) (DirectResult, error) {
	var res DirectResult
	recipients, err := snapshot.ParseRecipients(req.Recipients)
	if err != nil {
		return res, err
	}
	store, err := storage.OpenDirect(ctx, req.Access)
	if err != nil {
		return res, err
	}
	tarOut, tarIn := io.Pipe()
	go func() { tarIn.CloseWithError(Pack(dir, tarIn)) }()
	var listing Listing
	listing, err = storeTar(tarOut, func(compressed io.Reader) error {
		if len(recipients) > 0 {
			compressed = snapshot.Encrypt(compressed, recipients)
		}
		h := sha256.New()
		counter := &countWriter{}
		if err := store.Put(ctx, req.Key, io.TeeReader(compressed, io.MultiWriter(h, counter))); err != nil {
			return err
		}
		res.Bytes, res.SHA256 = counter.n, hex.EncodeToString(h.Sum(nil))
		return nil
	})
	res.Files, res.Skipped = listing.Files, listing.Skipped
	return res, err
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// storeTar compresses a tar stream with zstd into upload while listing the files it holds. On
// failure it closes tarStream with the error, so that its writer stops too.
func storeTar(tarStream *io.PipeReader, upload func(io.Reader) error) (Listing, error) {
	indexOut, indexIn := io.Pipe()
	zstdOut, zstdIn := io.Pipe()
	var listing Listing
	var g errgroup.Group
	g.Go(func() error {
		enc, err := zstd.NewWriter(zstdIn)
		if err == nil {
			_, err = io.Copy(enc, io.TeeReader(tarStream, indexIn))
			if cerr := enc.Close(); err == nil {
				err = cerr
			}
		}
		tarStream.CloseWithError(err)
		indexIn.CloseWithError(err)
		zstdIn.CloseWithError(err)
		return err
	})
	g.Go(func() error {
		var err error
		listing, err = Index(indexOut)
		io.Copy(io.Discard, indexOut) // whatever follows the end marker
		return err
	})
	g.Go(func() error {
		err := upload(zstdOut)
		zstdOut.CloseWithError(err)
		return err
	})
	return listing, g.Wait()
}

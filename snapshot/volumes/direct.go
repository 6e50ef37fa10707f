package volumes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/storage"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"
)

// A direct mover moves its volume to or from storage itself, so that data flows from many nodes at
// once and not through ferry; yet it never holds a credential. A backup mover uploads the parts of
// a multipart upload that ferry starts, each through a URL ferry presigns when the mover asks for
// it (for that part of that upload of that key, of that length), and ferry completes the upload
// with its own credentials once the mover's result adds up, or aborts it. A restore mover reads
// the one stored archive through a presigned GET. The URLs expire after presignExpiry, and
// encrypted archives never go to a mover: ferry decrypts them and streams them through exec.
//
// The conversation of a backup mover runs over the exec's stdin and stdout, one JSON value a line:
// ferry sends a DirectPackRequest, then answers each of the mover's presign asks with a partURL;
// the mover prints moverMessages: presign asks, uploaded parts and, last, its result.

const (
	// presignExpiry is how long a URL handed to a mover is valid. S3 checks it when a request
	// starts, so a long transfer is fine; a backup mover asks for each part's URL as it sends it.
	presignExpiry = 15 * time.Minute
	// minDirectPartSize is the smallest part of a direct upload.
	minDirectPartSize = 16 << 20
	// fullSizeParts parts have the size ferry picks from the claim's capacity; from then on the
	// size doubles every growEvery parts, so a stream larger than the capacity still fits S3's
	// 10,000 parts.
	fullSizeParts = 8000
	growEvery     = 500
	// A mover sends up to directUploadConcurrency parts at once, and reads a part only once the
	// parts it holds leave room for it in directUploadBudget bytes: it holds no more than the
	// budget, or one part where parts are larger (a claim of terabytes). With 16 MiB parts it
	// holds 80 MiB: four sent, one read.
	directUploadConcurrency = 4
	directUploadBudget      = 128 << 20
	// partAttempts is how often a mover tries a part, each time through a fresh URL; ferry presigns
	// no part more often.
	partAttempts = 4
)

// basePartSize is the size of a direct upload's parts for a claim of capacity bytes (0 unknown):
// its first fullSizeParts parts hold the capacity, in whole MiB, at least minDirectPartSize.
func basePartSize(capacity int64) int64 {
	size := (capacity + fullSizeParts - 1) / fullSizeParts
	size = (size + 1<<20 - 1) &^ (1<<20 - 1)
	return min(max(size, minDirectPartSize), storage.MaxPartSize)
}

// directPartSize is the size of part (from 1) of a direct upload whose parts start at base.
func directPartSize(base int64, part int32) int64 {
	if part <= fullSizeParts {
		return base
	}
	shift := (part-fullSizeParts-1)/growEvery + 1
	return min(base<<shift, storage.MaxPartSize)
}

// DirectPackRequest is ferry's first line to `ferry mover pack --direct`. Recipients are age
// public keys; nothing in it is secret.
type DirectPackRequest struct {
	Recipients []string `json:"recipients,omitempty"`
	// PartSize is the size of the first parts; see directPartSize.
	PartSize int64 `json:"partSize"`
}

// moverMessage is one line a direct backup mover prints; one field is set.
type moverMessage struct {
	// Presign asks for the URL of a part.
	Presign *partAsk `json:"presign,omitempty"`
	// Uploaded reports a part the server stored, with the ETag it gave.
	Uploaded *storage.UploadedPart `json:"uploaded,omitempty"`
	// Files are the next entries of the volume, as packed: the mover sends them as it goes, a
	// batch at a time, so that neither it nor ferry holds them all.
	Files []snapshot.File `json:"files,omitempty"`
	// Result ends the conversation: every part is uploaded.
	Result *DirectResult `json:"result,omitempty"`
}

// filesBatch is how many entries a mover sends in one message.
const filesBatch = 1000

type partAsk struct {
	Part int32 `json:"part"`
	Size int64 `json:"size"`
}

// partURL is ferry's answer to a presign ask: the part's URL, or why there is none.
type partURL struct {
	Part    int32                     `json:"part"`
	Request *storage.PresignedRequest `json:"request,omitempty"`
	Error   string                    `json:"error,omitempty"`
}

// DirectResult is the mover's last line once the upload's parts are all stored.
type DirectResult struct {
	// Files are the entries not sent before in messages of their own: none, from a mover of this
	// ferry; all of them, from an older one.
	Files []snapshot.File `json:"files,omitempty"`
	// Skipped lists the files left out: they changed while read, twice.
	Skipped []SkippedFile `json:"skipped,omitempty"`
	Bytes   int64         `json:"bytes"`  // stored
	SHA256  string        `json:"sha256"` // of the stored bytes
	Parts   int32         `json:"parts"`
}

// PackDirect runs in the mover pod (ferry mover pack --direct): it reads ferry's request from in,
// packs dir, compresses (and encrypts) the stream and uploads it in parts through the URLs ferry
// answers on in, printing its asks, its parts and its result on out.
func PackDirect(ctx context.Context, dir string, in io.Reader, out io.Writer) error {
	conv := &conversation{in: json.NewDecoder(in), out: json.NewEncoder(out), waiting: map[int32]chan partURL{}}
	var req DirectPackRequest
	if err := conv.in.Decode(&req); err != nil {
		return badinput.Errorf("request: %v", err)
	}
	if req.PartSize < storage.MinPartSize || req.PartSize > storage.MaxPartSize {
		return badinput.Errorf("request: part size %d: want %d to %d", req.PartSize, storage.MinPartSize, int64(storage.MaxPartSize))
	}
	recipients, err := snapshot.ParseRecipients(req.Recipients)
	if err != nil {
		return err
	}
	go conv.receive()
	up := &partUploader{conv: conv, base: req.PartSize, budget: directUploadBudget, hash: sha256.New(),
		clients: map[bool]*http.Client{false: storage.PresignedHTTPClient(false), true: storage.PresignedHTTPClient(true)}}
	tarOut, tarIn := io.Pipe()
	go func() { tarIn.CloseWithError(Pack(dir, tarIn)) }()
	var batch []snapshot.File
	skipped, err := storeTar(tarOut, func(compressed io.Reader) error {
		if len(recipients) > 0 {
			compressed = snapshot.Encrypt(compressed, recipients)
		}
		return up.upload(ctx, compressed)
	}, func(f snapshot.File) error {
		if batch = append(batch, f); len(batch) < filesBatch {
			return nil
		}
		err := conv.send(moverMessage{Files: batch})
		batch = batch[:0]
		return err
	})
	if err != nil {
		return err
	}
	if len(batch) > 0 {
		if err := conv.send(moverMessage{Files: batch}); err != nil {
			return err
		}
	}
	return conv.send(moverMessage{Result: &DirectResult{Skipped: skipped,
		Bytes: up.bytes, SHA256: hex.EncodeToString(up.hash.Sum(nil)), Parts: up.parts}})
}

// conversation is the mover's side of the JSON lines with ferry: asks go out, answers come back
// in any order and reach the part waiting for them.
type conversation struct {
	in *json.Decoder

	// writing guards out alone: a write waits for ferry to read, and ferry may be writing an
	// answer at that moment, which receive must be free to take (under mu) or both ends wait.
	writing sync.Mutex
	out     *json.Encoder

	mu      sync.Mutex
	waiting map[int32]chan partURL
	err     error // why ferry's answers ended
}

func (c *conversation) send(m moverMessage) error {
	c.writing.Lock()
	defer c.writing.Unlock()
	return c.out.Encode(m)
}

// receive hands ferry's answers to the parts that wait for them, until stdin ends.
func (c *conversation) receive() {
	for {
		var ans partURL
		if err := c.in.Decode(&ans); err != nil {
			c.mu.Lock()
			c.err = fmt.Errorf("ferry's answers ended: %w", err)
			for _, ch := range c.waiting {
				close(ch)
			}
			c.waiting = nil
			c.mu.Unlock()
			return
		}
		c.mu.Lock()
		ch := c.waiting[ans.Part]
		delete(c.waiting, ans.Part)
		c.mu.Unlock()
		if ch != nil {
			ch <- ans
		}
	}
}

// ask asks ferry for the URL of part and waits for it.
func (c *conversation) ask(ctx context.Context, part int32, size int64) (storage.PresignedRequest, error) {
	ch := make(chan partURL, 1)
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return storage.PresignedRequest{}, c.err
	}
	c.waiting[part] = ch
	c.mu.Unlock()
	if err := c.send(moverMessage{Presign: &partAsk{Part: part, Size: size}}); err != nil {
		c.mu.Lock()
		delete(c.waiting, part)
		c.mu.Unlock()
		return storage.PresignedRequest{}, err
	}
	select {
	case ans, ok := <-ch:
		switch {
		case !ok:
			c.mu.Lock()
			defer c.mu.Unlock()
			return storage.PresignedRequest{}, c.err
		case ans.Error != "":
			return storage.PresignedRequest{}, fmt.Errorf("part %d: ferry refused its URL: %s", part, ans.Error)
		case ans.Request == nil:
			return storage.PresignedRequest{}, fmt.Errorf("part %d: ferry answered no URL", part)
		}
		return *ans.Request, nil
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.waiting, part)
		c.mu.Unlock()
		return storage.PresignedRequest{}, ctx.Err()
	}
}

// partUploader cuts a stream into parts and sends them, a few at once, hashing the stream as it
// goes.
type partUploader struct {
	conv    *conversation
	clients map[bool]*http.Client // by InsecureSkipVerify
	base    int64
	budget  int64 // bytes of parts held at once (directUploadBudget)

	hash  hash.Hash
	bytes int64
	parts int32
}

func (u *partUploader) upload(ctx context.Context, r io.Reader) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(directUploadConcurrency)
	budget := semaphore.NewWeighted(u.budget)
	free := make(chan []byte, directUploadConcurrency+1) // buffers to reuse
	var readErr error
	for part := int32(1); gctx.Err() == nil; part++ {
		if part > storage.MaxParts {
			readErr = fmt.Errorf("the stream outgrew S3's %d parts (%d bytes so far)", storage.MaxParts, u.bytes)
			break
		}
		size := directPartSize(u.base, part)
		// Room first, then the read: a part read while the budget is full would be held beside
		// those sent, twice the budget's worth of memory where parts are large.
		weight := min(size, u.budget)
		if err := budget.Acquire(gctx, weight); err != nil {
			break
		}
		var buf []byte
		select {
		case buf = <-free:
		default:
		}
		if int64(cap(buf)) < size {
			buf = make([]byte, size)
		}
		n, err := io.ReadFull(r, buf[:size])
		last := err == io.EOF || err == io.ErrUnexpectedEOF
		if err != nil && !last {
			readErr = err
			break
		}
		if n == 0 {
			if part == 1 {
				readErr = errors.New("the stream is empty")
			}
			break
		}
		data := buf[:n]
		u.hash.Write(data)
		u.bytes += int64(n)
		u.parts = part
		g.Go(func() error {
			defer budget.Release(weight)
			err := u.send(gctx, part, data)
			select {
			case free <- data[:cap(data)]:
			default:
			}
			return err
		})
		if last {
			break
		}
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if readErr != nil {
		return readErr
	}
	return ctx.Err()
}

// send uploads one part, asking for a fresh URL for each attempt, and reports it to ferry.
func (u *partUploader) send(ctx context.Context, part int32, data []byte) error {
	for attempt := 1; ; attempt++ {
		req, err := u.conv.ask(ctx, part, int64(len(data)))
		if err != nil {
			return err
		}
		etag, err := storage.PutPresigned(ctx, u.clients[req.InsecureSkipVerify], req, data)
		if err == nil {
			return u.conv.send(moverMessage{Uploaded: &storage.UploadedPart{Number: part, ETag: etag, Size: int64(len(data))}})
		}
		retry, wait := retryPart(err)
		if attempt == partAttempts || ctx.Err() != nil || !retry {
			return fmt.Errorf("part %d: %w", part, err)
		}
		select {
		case <-time.After(time.Duration(attempt*attempt) * wait):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// retryPart tells a part worth sending again, and how long to wait before (times the attempt's
// square): the connection failed or the server was busy or failing (a while), or the URL was
// refused (at once: it may have expired, and the next attempt has a fresh one).
func retryPart(err error) (bool, time.Duration) {
	var se *storage.PresignedStatusError
	if !errors.As(err, &se) {
		return true, 250 * time.Millisecond
	}
	switch {
	case se.Status == http.StatusForbidden:
		return true, 0
	case se.Status == http.StatusRequestTimeout, se.Status == http.StatusTooManyRequests, se.Status >= 500:
		return true, 250 * time.Millisecond
	}
	return false, 0
}

// uploadDirect is ferry's side of a direct backup: it starts the multipart upload of key, runs
// the mover (run returns once it ended) with req on its stdin, answers its asks with presigned
// part URLs, and completes the upload once the mover's result adds up with the parts it reported.
// On any failure the upload is aborted: nothing half-written remains.
//
// ferry does not see the stream, so the result's SHA-256 is the mover's; the sizes ferry checks
// itself: every part's length is fixed by its URL's signature, the parts must be 1 to N, each
// reported once as presigned, and their sum, the result's bytes and the completed object's size
// must agree. Every later read of the stream checks its SHA-256 against the manifest.
func uploadDirect(ctx context.Context, p storage.Presigner, key string, req DirectPackRequest,
	run func(ctx context.Context, stdin io.Reader, stdout io.Writer) error, files func(snapshot.File) error) (DirectResult, error) {
	id, err := p.CreateUpload(ctx, key)
	if err != nil {
		return DirectResult{}, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stdinR, stdinW := io.Pipe()
	stdoutR, stdoutW := io.Pipe()
	ran := make(chan error, 1)
	go func() {
		err := run(runCtx, stdinR, stdoutW)
		if err == nil {
			err = io.EOF
		}
		stdoutW.CloseWithError(err)
		stdinR.CloseWithError(errMoverEnded) // ferry's answers stop there
		ran <- err
	}()
	res, parts, err := servePack(ctx, p, key, id, req, stdinW, stdoutR, files)
	stdinW.Close()
	if err != nil {
		cancel()
		stdoutR.CloseWithError(err) // a mover still printing stops there
	}
	// A mover that failed may have asked for a URL just before: ferry's answer then finds it
	// gone, and the mover's own error says why.
	if runErr := <-ran; runErr != io.EOF && (err == nil || errors.Is(err, errMoverEnded)) {
		err = runErr
	}
	if err == nil {
		var info storage.ObjectInfo
		info, err = p.CompleteUpload(ctx, key, id, parts)
		if err == nil && info.Size != res.Bytes {
			return res, fmt.Errorf("%s: %d bytes stored, the mover's parts hold %d", key, info.Size, res.Bytes)
		}
	}
	if err != nil {
		// Also after ctx ended: an unfinished upload is invisible, and billed.
		actx, acancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer acancel()
		if aerr := p.AbortUpload(actx, key, id); aerr != nil {
			err = fmt.Errorf("%w (and the upload was not aborted: %v)", err, aerr)
		}
		return res, err
	}
	return res, nil
}

// errMoverEnded is what ferry's answers to a mover that ended meet.
var errMoverEnded = errors.New("the mover ended")

// servePack holds ferry's side of the conversation until the mover's result, and returns it with
// the parts to complete the upload with; it hands the volume's entries to files as they come.
func servePack(ctx context.Context, p storage.Presigner, key, uploadID string, req DirectPackRequest, toMover io.Writer, fromMover io.Reader,
	files func(snapshot.File) error) (DirectResult, []storage.UploadedPart, error) {
	enc, dec := json.NewEncoder(toMover), json.NewDecoder(fromMover)
	if err := enc.Encode(req); err != nil {
		return DirectResult{}, nil, fmt.Errorf("hand the mover its request: %w", err)
	}
	sizes := map[int32]int64{} // of the parts presigned
	asked := map[int32]int{}
	uploaded := map[int32]storage.UploadedPart{}
	for {
		var m moverMessage
		if err := dec.Decode(&m); err != nil {
			if err == io.EOF {
				err = errors.New("it printed no result")
			}
			return DirectResult{}, nil, fmt.Errorf("the mover ended before its result: %w", err)
		}
		switch {
		case m.Presign != nil:
			ans := partURL{Part: m.Presign.Part}
			err := checkAsk(*m.Presign, req.PartSize, sizes, asked)
			if err == nil {
				var r storage.PresignedRequest
				if r, err = p.PresignPart(ctx, key, uploadID, m.Presign.Part, m.Presign.Size, presignExpiry); err == nil {
					ans.Request = &r
				}
			}
			if err != nil {
				ans.Error = err.Error()
			}
			if werr := enc.Encode(ans); err == nil && werr != nil {
				err = fmt.Errorf("answer the mover: %w", werr)
			}
			if err != nil {
				return DirectResult{}, nil, err
			}
		case m.Uploaded != nil:
			u := *m.Uploaded
			if size, ok := sizes[u.Number]; !ok || size != u.Size {
				return DirectResult{}, nil, fmt.Errorf("the mover reports part %d of %d bytes uploaded, which it has no URL for", u.Number, u.Size)
			}
			uploaded[u.Number] = u
		case m.Files != nil:
			for _, f := range m.Files {
				if err := files(f); err != nil {
					return DirectResult{}, nil, err
				}
			}
		case m.Result != nil:
			for _, f := range m.Result.Files { // a mover older than this ferry sends them here
				if err := files(f); err != nil {
					return DirectResult{}, nil, err
				}
			}
			m.Result.Files = nil
			parts, err := checkResult(*m.Result, uploaded)
			return *m.Result, parts, err
		default:
			return DirectResult{}, nil, errors.New("the mover printed a message that is none of presign, uploaded or result")
		}
	}
}

// checkAsk refuses a URL for a part outside S3's limits or the part sizes ferry set, asked for
// with another size than before, or too often.
func checkAsk(a partAsk, base int64, sizes map[int32]int64, asked map[int32]int) error {
	switch {
	case a.Part < 1 || a.Part > storage.MaxParts:
		return fmt.Errorf("the mover asked for part %d: parts are numbered 1 to %d", a.Part, storage.MaxParts)
	case a.Size < 1:
		return fmt.Errorf("the mover asked for part %d of %d bytes: a part holds at least one", a.Part, a.Size)
	case a.Size > directPartSize(base, a.Part):
		return fmt.Errorf("the mover asked for part %d of %d bytes: larger than the %d of its size", a.Part, a.Size, directPartSize(base, a.Part))
	case sizes[a.Part] != 0 && sizes[a.Part] != a.Size:
		return fmt.Errorf("the mover asked for part %d of %d bytes: it asked for it with another size (%d) before", a.Part, a.Size, sizes[a.Part])
	case asked[a.Part] >= partAttempts:
		return fmt.Errorf("the mover asked for part %d more than %d times", a.Part, partAttempts)
	}
	sizes[a.Part] = a.Size
	asked[a.Part]++
	return nil
}

// checkResult makes sure the mover's result and the parts it reported agree, and returns the
// parts in order.
func checkResult(res DirectResult, uploaded map[int32]storage.UploadedPart) ([]storage.UploadedPart, error) {
	if len(uploaded) != int(res.Parts) {
		return nil, fmt.Errorf("the mover reports %d parts, it uploaded %d", res.Parts, len(uploaded))
	}
	parts := make([]storage.UploadedPart, 0, len(uploaded))
	var sum int64
	for n := int32(1); n <= res.Parts; n++ {
		u, ok := uploaded[n]
		if !ok {
			return nil, fmt.Errorf("part %d of the %d parts the mover reports is not uploaded", n, res.Parts)
		}
		parts = append(parts, u)
		sum += u.Size
	}
	if sum != res.Bytes {
		return nil, fmt.Errorf("the mover reports %d bytes, its parts hold %d", res.Bytes, sum)
	}
	if b, err := hex.DecodeString(res.SHA256); err != nil || len(b) != sha256.Size {
		return nil, fmt.Errorf("the mover reports SHA-256 %q", res.SHA256)
	}
	return parts, nil
}

// directUnpackRequest is what a restore mover gets to stage the stored archive at key: a GET
// presigned for that object alone, expiring after presignExpiry. Encrypted archives are refused:
// they are decrypted by ferry, never by a mover.
func directUnpackRequest(ctx context.Context, p storage.Presigner, key string) (DirectUnpackRequest, error) {
	if strings.HasSuffix(key, snapshot.EncryptedSuffix) {
		return DirectUnpackRequest{}, fmt.Errorf("%s is encrypted: ferry decrypts it, a mover never gets the age identity", key)
	}
	get, err := p.PresignGet(ctx, key, presignExpiry)
	if err != nil {
		return DirectUnpackRequest{}, err
	}
	return DirectUnpackRequest{Key: key, Get: get}, nil
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// storeTar compresses a tar stream with zstd into upload while handing the files it holds to
// emit; it returns those Pack left out. On failure it closes tarStream with the error, so that its
// writer stops too.
func storeTar(tarStream *io.PipeReader, upload func(io.Reader) error, emit func(snapshot.File) error) ([]SkippedFile, error) {
	indexOut, indexIn := io.Pipe()
	zstdOut, zstdIn := io.Pipe()
	var skipped []SkippedFile
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
		skipped, err = IndexEach(indexOut, emit)
		if err != nil {
			indexOut.CloseWithError(err) // the copy stops too
			return err
		}
		io.Copy(io.Discard, indexOut) // whatever follows the end marker
		return err
	})
	g.Go(func() error {
		err := upload(zstdOut)
		zstdOut.CloseWithError(err)
		return err
	})
	return skipped, g.Wait()
}

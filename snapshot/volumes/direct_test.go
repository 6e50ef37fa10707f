package volumes

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/storage"
	"github.com/klauspost/compress/zstd"
)

// fakeS3 stands in for S3's presigned URLs in unit tests: an HTTP server on 127.0.0.1 that
// honours a URL for its method, key, upload, part, length and expiry only.
type fakeS3 struct {
	srv *httptest.Server

	mu      sync.Mutex
	objects map[string][]byte
	uploads map[string]*fakeUpload // by ID
	grants  map[string]fakeGrant   // by the URL's token
	// fail, when set, is the status to answer a PUT of a part with, on the attempt-th try.
	fail  func(part int32, attempt int) int
	puts  map[int32]int
	asked int // presigned URLs handed out
}

type fakeUpload struct {
	key   string
	parts map[int32][]byte
}

type fakeGrant struct {
	method, key, upload string
	part                int32
	size                int64
	expires             time.Time
}

// fakeSecret is the fake's secret key: it must never reach a mover.
const fakeSecret = "fake-secret-access-key-do-not-hand-out"

var _ storage.Presigner = (*fakeS3)(nil)

func newFakeS3(t *testing.T) *fakeS3 {
	f := &fakeS3{objects: map[string][]byte{}, uploads: map[string]*fakeUpload{}, grants: map[string]fakeGrant{}, puts: map[int32]int{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeS3) grant(g fakeGrant) storage.PresignedRequest {
	var tok [16]byte
	rand.Read(tok[:])
	token := hex.EncodeToString(tok[:])
	f.mu.Lock()
	f.grants[token] = g
	f.asked++
	f.mu.Unlock()
	return storage.PresignedRequest{Method: g.method, URL: f.srv.URL + "/" + g.key + "?token=" + token, Expires: g.expires}
}

func (f *fakeS3) refuse(w http.ResponseWriter, status int, code string) {
	w.WriteHeader(status)
	fmt.Fprintf(w, "<Error><Code>%s</Code><StringToSign>%s</StringToSign></Error>", code, fakeSecret)
}

func (f *fakeS3) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	g, ok := f.grants[r.URL.Query().Get("token")]
	switch {
	case !ok || g.method != r.Method || "/"+g.key != r.URL.Path:
		f.refuse(w, http.StatusForbidden, "SignatureDoesNotMatch")
		return
	case time.Now().After(g.expires):
		f.refuse(w, http.StatusForbidden, "AccessDenied")
		return
	}
	if r.Method == http.MethodGet {
		data, ok := f.objects[g.key]
		if !ok {
			f.refuse(w, http.StatusNotFound, "NoSuchKey")
			return
		}
		w.Write(data)
		return
	}
	if r.ContentLength != g.size {
		f.refuse(w, http.StatusForbidden, "SignatureDoesNotMatch")
		return
	}
	up, ok := f.uploads[g.upload]
	if !ok {
		f.refuse(w, http.StatusNotFound, "NoSuchUpload")
		return
	}
	f.puts[g.part]++
	if f.fail != nil {
		if status := f.fail(g.part, f.puts[g.part]); status != 0 {
			f.refuse(w, status, "InternalError")
			return
		}
	}
	data, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	up.parts[g.part] = data
	sum := md5.Sum(data)
	w.Header().Set("ETag", `"`+hex.EncodeToString(sum[:])+`"`)
}

func (f *fakeS3) PresignGet(ctx context.Context, key string, expires time.Duration) (storage.PresignedRequest, error) {
	return f.grant(fakeGrant{method: http.MethodGet, key: key, expires: time.Now().Add(expires)}), nil
}

func (f *fakeS3) CreateUpload(ctx context.Context, key string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := fmt.Sprintf("upload-%d", len(f.uploads)+1)
	f.uploads[id] = &fakeUpload{key: key, parts: map[int32][]byte{}}
	return id, nil
}

func (f *fakeS3) PresignPart(ctx context.Context, key, uploadID string, part int32, size int64, expires time.Duration) (storage.PresignedRequest, error) {
	if part < 1 || part > storage.MaxParts || size < 1 || size > storage.MaxPartSize {
		return storage.PresignedRequest{}, fmt.Errorf("part %d of %d bytes", part, size)
	}
	return f.grant(fakeGrant{method: http.MethodPut, key: key, upload: uploadID, part: part, size: size, expires: time.Now().Add(expires)}), nil
}

func (f *fakeS3) CompleteUpload(ctx context.Context, key, uploadID string, parts []storage.UploadedPart) (storage.ObjectInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	up, ok := f.uploads[uploadID]
	if !ok || up.key != key {
		return storage.ObjectInfo{}, errors.New("NoSuchUpload")
	}
	var data []byte
	for i, p := range parts {
		stored, ok := up.parts[p.Number]
		sum := md5.Sum(stored)
		switch {
		case !ok || p.ETag != `"`+hex.EncodeToString(sum[:])+`"`:
			return storage.ObjectInfo{}, fmt.Errorf("InvalidPart %d", p.Number)
		case i > 0 && p.Number <= parts[i-1].Number:
			return storage.ObjectInfo{}, errors.New("InvalidPartOrder")
		case i < len(parts)-1 && len(stored) < storage.MinPartSize:
			return storage.ObjectInfo{}, fmt.Errorf("EntityTooSmall: part %d", p.Number)
		}
		data = append(data, stored...)
	}
	f.objects[key] = data
	delete(f.uploads, uploadID)
	return storage.ObjectInfo{Key: key, Size: int64(len(data))}, nil
}

func (f *fakeS3) AbortUpload(ctx context.Context, key, uploadID string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.uploads, uploadID)
	return nil
}

// nothingLeft asserts that no upload is open and, when key is set, nothing is stored under it.
func (f *fakeS3) nothingLeft(t *testing.T, key string) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.uploads) != 0 {
		t.Errorf("%d uploads left open", len(f.uploads))
	}
	if _, ok := f.objects[key]; ok && key != "" {
		t.Errorf("%s was stored", key)
	}
}

// lockedBuffer records what a mover read, written and read from different goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// volumeDir holds a few small files and one of incompressible data, so that its stream takes
// three parts of storage.MinPartSize.
func volumeDir(t *testing.T) string {
	dir := t.TempDir()
	big := make([]byte, 12<<20)
	rng := mrand.NewChaCha8([32]byte{1})
	rng.Read(big)
	for name, data := range map[string][]byte{"model.bin": big, "notes.txt": []byte("hello"), "sub/config.json": []byte(`{"a": 1}`)} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// moverRun runs the mover side in this process, as `ferry mover pack --direct` would in a pod,
// recording what it read on stdin.
func moverRun(dir string, seen io.Writer) func(ctx context.Context, stdin io.Reader, stdout io.Writer) error {
	return func(ctx context.Context, stdin io.Reader, stdout io.Writer) error {
		return PackDirect(ctx, dir, io.TeeReader(stdin, seen), stdout)
	}
}

// collect gathers what the mover reports of the volume's files.
func collect(into *[]snapshot.File) func(snapshot.File) error {
	return func(f snapshot.File) error {
		*into = append(*into, f)
		return nil
	}
}

// TestDirectPack: the mover packs and uploads the volume in parts through URLs ferry presigns on
// demand; ferry completes the upload. What the mover reads holds no credential and no age
// identity, only presigned URLs (and public recipients).
func TestDirectPack(t *testing.T) {
	ctx := context.Background()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	for _, encrypted := range []bool{false, true} {
		t.Run(fmt.Sprintf("encrypted=%v", encrypted), func(t *testing.T) {
			fake := newFakeS3(t)
			dir := volumeDir(t)
			key := "backups/b/volumes/ns/claim.tar.zst"
			req := DirectPackRequest{PartSize: storage.MinPartSize}
			if encrypted {
				key += snapshot.EncryptedSuffix
				req.Recipients = []string{id.Recipient().String()}
			}
			var seen lockedBuffer
			var reported []snapshot.File
			res, err := uploadDirect(ctx, fake, key, req, moverRun(dir, &seen), collect(&reported))
			if err != nil {
				t.Fatal(err)
			}
			stored := fake.objects[key]
			sum := sha256.Sum256(stored)
			if res.Bytes != int64(len(stored)) || res.SHA256 != hex.EncodeToString(sum[:]) || res.Parts != 3 {
				t.Fatalf("result %d bytes, SHA-256 %s, %d parts; stored %d bytes, %x", res.Bytes, res.SHA256, res.Parts, len(stored), sum)
			}
			fake.nothingLeft(t, "")
			var plain io.Reader = bytes.NewReader(stored)
			if encrypted {
				if plain, err = age.Decrypt(plain, id); err != nil {
					t.Fatal(err)
				}
			}
			dec, err := zstd.NewReader(plain)
			if err != nil {
				t.Fatal(err)
			}
			defer dec.Close()
			listing, err := Index(dec)
			if err != nil {
				t.Fatal(err)
			}
			if len(reported) > 0 && reported[0].Path == RootPath {
				reported = reported[1:] // the volume's root folder, which the listing holds apart
			}
			if len(listing.Files) == 0 || listing.Root == nil || !slices.EqualFunc(listing.Files, reported, func(a, b snapshot.File) bool { return a.Path == b.Path && a.SHA256 == b.SHA256 && a.Size == b.Size }) {
				t.Fatalf("the stored archive lists %+v, the mover reported %+v", listing.Files, reported)
			}
			conversation := seen.String()
			for _, bad := range []string{fakeSecret, "AGE-SECRET-KEY", "secretAccessKey", "accessKeyID", "identities"} {
				if strings.Contains(strings.ToUpper(conversation), strings.ToUpper(bad)) {
					t.Errorf("the mover was handed %q", bad)
				}
			}
			if n := strings.Count(conversation, `"url":`); n != 3 {
				t.Errorf("the mover was handed %d URLs, want one per part (3)", n)
			}
			t.Logf("%d bytes in %d parts; the mover read %d bytes of requests", res.Bytes, res.Parts, len(conversation))
		})
	}
}

// TestDirectPackRetriesParts: a part the server failed is sent again, through a fresh URL; a
// part the server refuses for good fails the upload, which ferry aborts, and the error names the
// part, never the URL.
func TestDirectPackRetriesParts(t *testing.T) {
	ctx := context.Background()
	key := "backups/b/volumes/ns/claim.tar.zst"
	fake := newFakeS3(t)
	fake.fail = func(part int32, attempt int) int {
		if part == 2 && attempt == 1 {
			return http.StatusServiceUnavailable
		}
		return 0
	}
	res, err := uploadDirect(ctx, fake, key, DirectPackRequest{PartSize: storage.MinPartSize}, moverRun(volumeDir(t), io.Discard), collect(new([]snapshot.File)))
	if err != nil || res.Parts != 3 {
		t.Fatalf("an upload whose part 2 failed once: %d parts, %v", res.Parts, err)
	}
	if fake.puts[2] != 2 || fake.asked != 4 {
		t.Errorf("part 2 was sent %d times through %d URLs in all, want twice, 4 URLs", fake.puts[2], fake.asked)
	}

	fake = newFakeS3(t)
	fake.fail = func(part int32, attempt int) int {
		if part == 2 {
			return http.StatusForbidden
		}
		return 0
	}
	_, err = uploadDirect(ctx, fake, key, DirectPackRequest{PartSize: storage.MinPartSize}, moverRun(volumeDir(t), io.Discard), collect(new([]snapshot.File)))
	if err == nil || !strings.Contains(err.Error(), "part 2") || !strings.Contains(err.Error(), "403") {
		t.Fatalf("an upload whose part 2 is refused: %v, want an error naming part 2 and the status", err)
	}
	if strings.Contains(err.Error(), "token=") || strings.Contains(err.Error(), fakeSecret) || strings.Contains(err.Error(), fake.srv.URL) {
		t.Fatalf("the error gives the URL away: %v", err)
	}
	fake.nothingLeft(t, key)
	t.Logf("refused part: %v", err)
}

// scripted is a mover that says what the test says, after reading ferry's request.
func scripted(script func(in *json.Decoder, out *json.Encoder) error) func(ctx context.Context, stdin io.Reader, stdout io.Writer) error {
	return func(ctx context.Context, stdin io.Reader, stdout io.Writer) error {
		in, out := json.NewDecoder(stdin), json.NewEncoder(stdout)
		var req DirectPackRequest
		if err := in.Decode(&req); err != nil {
			return err
		}
		return script(in, out)
	}
}

// ask asks for a part's URL and returns ferry's answer.
func ask(in *json.Decoder, out *json.Encoder, part int32, size int64) (partURL, error) {
	var ans partURL
	if err := out.Encode(moverMessage{Presign: &partAsk{Part: part, Size: size}}); err != nil {
		return ans, err
	}
	err := in.Decode(&ans)
	return ans, err
}

// TestDirectPackRefusals: ferry hands out URLs only for parts within S3's limits and the part
// sizes it set, and completes only an upload whose parts add up to the mover's result; anything
// else fails the volume, and the upload is aborted.
func TestDirectPackRefusals(t *testing.T) {
	ctx := context.Background()
	const key = "backups/b/volumes/ns/claim.tar.zst"
	const base = storage.MinPartSize
	client := storage.PresignedHTTPClient(false)
	// put asks for part 1 of data's length, uploads it and reports it with etag (its own when empty).
	put := func(in *json.Decoder, out *json.Encoder, part int32, data []byte, etag string) error {
		ans, err := ask(in, out, part, int64(len(data)))
		if err != nil || ans.Error != "" {
			return fmt.Errorf("ask: %v %s", err, ans.Error)
		}
		got, err := storage.PutPresigned(ctx, client, *ans.Request, data)
		if err != nil {
			return err
		}
		if etag == "" {
			etag = got
		}
		return out.Encode(moverMessage{Uploaded: &storage.UploadedPart{Number: part, ETag: etag, Size: int64(len(data))}})
	}
	result := func(out *json.Encoder, bytes int64, parts int32) error {
		return out.Encode(moverMessage{Result: &DirectResult{Bytes: bytes, SHA256: strings.Repeat("0", 64), Parts: parts}})
	}
	refusedAsk := func(part int32, size int64) func(in *json.Decoder, out *json.Encoder) error {
		return func(in *json.Decoder, out *json.Encoder) error {
			ans, err := ask(in, out, part, size)
			if err == nil && ans.Error == "" {
				return errors.New("the mover got its URL")
			}
			return errors.New("the mover gave up: " + ans.Error)
		}
	}
	for _, tc := range []struct {
		name   string
		script func(in *json.Decoder, out *json.Encoder) error
		want   string
	}{
		{"part 0", refusedAsk(0, 10), "part 0"},
		{"part beyond S3's 10,000", refusedAsk(storage.MaxParts+1, 10), "part 10001"},
		{"empty part", refusedAsk(1, 0), "0 bytes"},
		{"part larger than its size", refusedAsk(1, base+1), "larger than"},
		{"one part, two sizes", func(in *json.Decoder, out *json.Encoder) error {
			if _, err := ask(in, out, 1, 10); err != nil {
				return err
			}
			return refusedAsk(1, 11)(in, out)
		}, "another size"},
		{"asked too often", func(in *json.Decoder, out *json.Encoder) error {
			for range partAttempts {
				if _, err := ask(in, out, 1, 10); err != nil {
					return err
				}
			}
			return refusedAsk(1, 10)(in, out)
		}, "asked for"},
		{"uploaded without a URL", func(in *json.Decoder, out *json.Encoder) error {
			out.Encode(moverMessage{Uploaded: &storage.UploadedPart{Number: 2, ETag: `"x"`, Size: 10}})
			return nil
		}, "part 2"},
		{"bytes that do not add up", func(in *json.Decoder, out *json.Encoder) error {
			if err := put(in, out, 1, []byte("0123456789"), ""); err != nil {
				return err
			}
			return result(out, 11, 1)
		}, "11 bytes"},
		{"parts that do not add up", func(in *json.Decoder, out *json.Encoder) error {
			if err := put(in, out, 1, []byte("0123456789"), ""); err != nil {
				return err
			}
			return result(out, 10, 2)
		}, "2 parts"},
		{"a part missing", func(in *json.Decoder, out *json.Encoder) error {
			if _, err := ask(in, out, 1, 10); err != nil {
				return err
			}
			if err := put(in, out, 2, []byte("0123456789"), ""); err != nil {
				return err
			}
			return result(out, 10, 1)
		}, "part 1"},
		{"a wrong ETag", func(in *json.Decoder, out *json.Encoder) error {
			if err := put(in, out, 1, []byte("0123456789"), `"bogus"`); err != nil {
				return err
			}
			return result(out, 10, 1)
		}, "InvalidPart"},
		{"no result", func(in *json.Decoder, out *json.Encoder) error {
			return errors.New("mover killed")
		}, "mover killed"},
		{"an empty message", func(in *json.Decoder, out *json.Encoder) error {
			out.Encode(struct{}{})
			return nil
		}, "message"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := newFakeS3(t)
			_, err := uploadDirect(ctx, fake, key, DirectPackRequest{PartSize: base}, scripted(tc.script), collect(new([]snapshot.File)))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
			fake.nothingLeft(t, key)
		})
	}
}

// TestDirectPartSizes: parts start at the size ferry picks from the claim's capacity and grow
// late, so that S3's 10,000 parts hold well over the capacity (or S3's largest object), within
// S3's part sizes.
func TestDirectPartSizes(t *testing.T) {
	for _, capacity := range []int64{0, 1 << 30, 100 << 30, 1 << 40, 10 << 40} {
		base := basePartSize(capacity)
		var total int64
		prev := int64(0)
		for part := int32(1); part <= storage.MaxParts; part++ {
			size := directPartSize(base, part)
			if size < prev || size < minDirectPartSize || size > storage.MaxPartSize {
				t.Fatalf("capacity %d: part %d of %d bytes after %d", capacity, part, size, prev)
			}
			prev = size
			total += size
		}
		// Twice the capacity, or S3's largest object (5 TiB).
		if want := min(2*capacity, 5<<40); total < want {
			t.Errorf("capacity %d: 10,000 parts hold %d bytes, want at least %d", capacity, total, want)
		}
		if base%(1<<20) != 0 || (capacity < 100<<30 && base != minDirectPartSize) {
			t.Errorf("capacity %d: parts of %d bytes", capacity, base)
		}
		t.Logf("capacity %d GiB: parts of %d MiB, 10,000 hold %d GiB", capacity>>30, base>>20, total>>30)
	}
}

// TestStageDirect: a restore mover reads the volume's stored archive with a presigned GET and
// stages it; the request holds that URL and nothing secret. Encrypted archives are never handed
// to a mover: ferry decrypts them itself.
func TestStageDirect(t *testing.T) {
	ctx := context.Background()
	fake := newFakeS3(t)
	src := volumeDir(t)
	var tarball bytes.Buffer
	enc, err := zstd.NewWriter(&tarball)
	if err != nil {
		t.Fatal(err)
	}
	if err := Pack(src, enc); err != nil {
		t.Fatal(err)
	}
	enc.Close()
	const key = "backups/b/volumes/ns/claim.tar.zst"
	fake.objects[key] = tarball.Bytes()

	req, err := directUnpackRequest(ctx, fake, key)
	if err != nil {
		t.Fatal(err)
	}
	line, _ := json.Marshal(req)
	for _, bad := range []string{fakeSecret, "AGE-SECRET-KEY", "identities", "secretAccessKey"} {
		if bytes.Contains(line, []byte(bad)) {
			t.Errorf("the request holds %q", bad)
		}
	}
	if until := time.Until(req.Get.Expires); until > presignExpiry || until < presignExpiry-time.Minute {
		t.Errorf("the URL expires in %s, want %s", until, presignExpiry)
	}
	dst := t.TempDir()
	res, err := StageDirect(ctx, dst, req)
	if err != nil || res.Error != "" {
		t.Fatalf("StageDirect: %v %s", err, res.Error)
	}
	sum := sha256.Sum256(tarball.Bytes())
	if n := len(listedFiles(t, dst, res.Staged)); res.Stored.Bytes != int64(tarball.Len()) || res.Stored.SHA256 != hex.EncodeToString(sum[:]) || n != 4 {
		t.Fatalf("staged %d entries from %d bytes (%s), want 4 from %d", n, res.Stored.Bytes, res.Stored.SHA256, tarball.Len())
	}
	if err := Abort(dst, res.Staged); err != nil {
		t.Fatal(err)
	}

	// An expired URL reads nothing, and the error does not give the URL away.
	expired, err := fake.PresignGet(ctx, key, -time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_, err = StageDirect(ctx, dst, DirectUnpackRequest{Key: key, Get: expired})
	if err == nil || !strings.Contains(err.Error(), "403") || strings.Contains(err.Error(), "token=") {
		t.Fatalf("StageDirect with an expired URL: %v", err)
	}

	if _, err := directUnpackRequest(ctx, fake, key+snapshot.EncryptedSuffix); err == nil {
		t.Fatal("ferry presigned an encrypted archive for a mover")
	}
	if _, err := StageDirect(ctx, dst, DirectUnpackRequest{Key: key + snapshot.EncryptedSuffix, Get: req.Get}); err == nil {
		t.Fatal("a mover staged an encrypted archive")
	}
}

// countingReader counts what was read of r.
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// TestDirectPackHoldsItsBudget: where parts are larger than the mover's budget (a claim of
// terabytes has parts of hundreds of MiB), a part is read only once the one sent before is done:
// the mover holds one part, not two, and stays within its pod's memory.
func TestDirectPackHoldsItsBudget(t *testing.T) {
	const part = 1 << 20
	stream := &countingReader{r: bytes.NewReader(make([]byte, 3*part))}
	fromMover, toFerry := io.Pipe()
	fromFerry, toMover := io.Pipe()
	conv := &conversation{in: json.NewDecoder(fromFerry), out: json.NewEncoder(toFerry), waiting: map[int32]chan partURL{}}
	go conv.receive()
	readWhileFirstWasSent := make(chan int64, 1)
	go func() {
		in, out := json.NewDecoder(fromMover), json.NewEncoder(toMover)
		for {
			var m moverMessage
			if err := in.Decode(&m); err != nil {
				return
			}
			if m.Presign == nil {
				continue
			}
			if m.Presign.Part == 1 {
				time.Sleep(200 * time.Millisecond) // the part is on its way
				readWhileFirstWasSent <- stream.n.Load()
			}
			out.Encode(partURL{Part: m.Presign.Part, Error: "the test stops here"})
		}
	}()
	u := &partUploader{conv: conv, base: part, budget: part / 2, hash: sha256.New()}
	err := u.upload(context.Background(), stream)
	toMover.Close()
	toFerry.Close()
	if err == nil || !strings.Contains(err.Error(), "the test stops here") {
		t.Fatalf("upload: %v, want ferry's refusal", err)
	}
	if n := <-readWhileFirstWasSent; n != part {
		t.Errorf("the mover had read %d bytes while part 1 of %d was sent: it read ahead beyond its budget of %d", n, part, part/2)
	}
}

// TestDirectPackSaysWhyTheMoverEnded: a mover that fails just after asking for a URL (a part of
// it refused) ends before ferry's answer reaches it: the error is the mover's, naming the part,
// not the answer's that found it gone.
func TestDirectPackSaysWhyTheMoverEnded(t *testing.T) {
	fake := newFakeS3(t)
	_, err := uploadDirect(context.Background(), fake, "backups/b/volumes/ns/claim.tar.zst", DirectPackRequest{PartSize: storage.MinPartSize},
		scripted(func(in *json.Decoder, out *json.Encoder) error {
			if err := out.Encode(moverMessage{Presign: &partAsk{Part: 3, Size: storage.MinPartSize}}); err != nil {
				return err
			}
			return errors.New("part 2: PUT refused: 403 Forbidden")
		}), collect(new([]snapshot.File)))
	if err == nil || !strings.Contains(err.Error(), "part 2") {
		t.Fatalf("a mover that failed after an ask: %v, want its own error", err)
	}
}

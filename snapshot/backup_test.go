package snapshot

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/storage"
)

func newStore(t testing.TB) storage.Backend {
	t.Helper()
	s, err := storage.NewFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestWriterManifestLastAndListing(t *testing.T) {
	ctx := context.Background()
	store := newStore(t)
	w, err := Create(ctx, store, "b1", plans.Cluster{Server: "https://blue"}, &plans.Plan{}, time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Put(ctx, "b1.tar.gz", strings.NewReader("archive")); err != nil {
		t.Fatal(err)
	}
	infos, _ := List(ctx, store)
	if len(infos) != 1 || infos[0].State != Incomplete {
		t.Fatalf("before the manifest: %+v, want one incomplete backup", infos)
	}
	if _, err := ReadManifest(ctx, store, "b1"); err == nil || !badinput.Is(err) {
		t.Fatalf("reading an incomplete backup: %v", err)
	}
	w.AddObjects([]Object{{Version: "v1", Kind: "ConfigMap", Resource: "configmaps", Namespace: "a", Name: "c", SHA256: "x"}}, 10)
	m, err := w.Commit(ctx, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if m.Totals.Objects != 1 || len(m.Streams) != 1 || m.Streams[0].Bytes != int64(len("archive")) {
		t.Fatalf("manifest: %+v", m)
	}
	infos, _ = List(ctx, store)
	if len(infos) != 1 || infos[0].State != Complete {
		t.Fatalf("after the manifest: %+v", infos)
	}
	if _, err := Create(ctx, store, "b1", plans.Cluster{}, &plans.Plan{}, time.Now(), nil); !errors.Is(err, ErrExists) {
		t.Fatalf("creating b1 again: %v, want ErrExists", err)
	}
	n, err := Delete(ctx, store, "b1")
	if err != nil || n != 3 { // claim, archive, manifest
		t.Fatalf("Delete = %d, %v", n, err)
	}
	if infos, _ := List(ctx, store); len(infos) != 0 {
		t.Fatalf("after Delete: %+v", infos)
	}
	if _, err := Delete(ctx, store, "b1"); !badinput.Is(err) {
		t.Fatalf("deleting a missing backup: %v", err)
	}
}

func TestCreateRaceHasOneWinner(t *testing.T) {
	ctx := context.Background()
	store := newStore(t)
	var wins int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if _, err := Create(ctx, store, "same", plans.Cluster{}, &plans.Plan{}, time.Now(), nil); err == nil {
				mu.Lock()
				wins++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if wins != 1 {
		t.Fatalf("%d writers created the same backup, want 1", wins)
	}
}

func TestEncryptedPut(t *testing.T) {
	ctx := context.Background()
	store := newStore(t)
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	w, err := Create(ctx, store, "enc", plans.Cluster{}, &plans.Plan{}, time.Now(), []string{id.Recipient().String()})
	if err != nil {
		t.Fatal(err)
	}
	secret := []byte("password: hunter2, and much more data to encrypt")
	name, err := w.Put(ctx, "databases/db.sql.zst", bytes.NewReader(secret))
	if err != nil || name != "databases/db.sql.zst.age" {
		t.Fatalf("Put = %q, %v", name, err)
	}
	if err := w.PutPlain(ctx, VeleroFile, strings.NewReader("{}")); err == nil {
		t.Fatal("a plain file went into an encrypted backup")
	}
	m, err := w.Commit(ctx, time.Now())
	if err != nil || m.Encryption == nil || m.Encryption.Recipients[0] != id.Recipient().String() {
		t.Fatalf("manifest encryption %+v, %v", m.Encryption, err)
	}
	rc, err := store.Get(ctx, Prefix("enc")+name)
	if err != nil {
		t.Fatal(err)
	}
	stored, _ := io.ReadAll(rc)
	rc.Close()
	if bytes.Contains(stored, []byte("hunter2")) {
		t.Fatal("the stored file holds the plain text")
	}
	dec, err := age.Decrypt(bytes.NewReader(stored), id)
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := io.ReadAll(dec)
	if !bytes.Equal(plain, secret) {
		t.Fatalf("decrypted %q", plain)
	}
	if _, err := Create(ctx, store, "bad", plans.Cluster{}, &plans.Plan{}, time.Now(), []string{"age1notakey"}); !badinput.Is(err) {
		t.Fatalf("bad recipient: %v", err)
	}
}

func TestCheckName(t *testing.T) {
	for name, ok := range map[string]bool{"ferry-20261129-120000": true, "a": true, "b.1": true, "": false, "Upper": false, "-x": false, "x/y": false, strings.Repeat("a", 64): false} {
		if err := CheckName(name); (err == nil) != ok {
			t.Errorf("CheckName(%q) = %v, want ok=%v", name, err, ok)
		}
	}
}

// TestParseRecipientsHidesSecrets: a value given to --encrypt-to that is not a recipient is
// refused as bad input without showing it (an identity given by mistake is a secret key), but a
// mistyped recipient, which is public, is named.
func TestParseRecipientsHidesSecrets(t *testing.T) {
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	recipient := id.Recipient().String()
	typo := recipient[:10] + "q" + recipient[11:]
	if typo == recipient {
		typo = recipient[:10] + "p" + recipient[11:]
	}
	for _, tc := range []struct {
		name, value, want, hidden string
	}{
		{"identity", id.String(), "recipient (value 2 of 2): is an age identity, a secret key, not shown", id.String()[16:28]},
		{"identity in lower case", strings.ToLower(id.String()), "is an age identity", strings.ToLower(id.String()[16:28])},
		{"password", "hunter2-s3cr3t", "recipient (value 2 of 2): 14 characters, not shown", "s3cr3t"},
		{"mistyped recipient", typo, typo, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseRecipients([]string{recipient, tc.value})
			if err == nil || !badinput.Is(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ParseRecipients(%s) = %v, want a bad-input error saying %q", tc.name, err, tc.want)
			}
			if tc.hidden != "" && strings.Contains(err.Error(), tc.hidden) {
				t.Errorf("ParseRecipients(%s)'s error shows the value: %v", tc.name, err)
			}
		})
	}
	if r, err := ParseRecipients([]string{recipient}); err != nil || len(r) != 1 {
		t.Errorf("ParseRecipients(a recipient) = %v, %v", r, err)
	}
}

// TestPutAgainReplacesTheStream: a stream retried into the same file is recorded once, as last
// stored, so the manifest matches what storage holds.
func TestPutAgainReplacesTheStream(t *testing.T) {
	ctx := context.Background()
	store := newStore(t)
	w, err := Create(ctx, store, "retried", plans.Cluster{}, &plans.Plan{}, time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, data := range []string{"a stream that ended ea", "the whole stream"} {
		if _, err := w.Put(ctx, "volumes/ns/claim.tar.zst", strings.NewReader(data)); err != nil {
			t.Fatal(err)
		}
	}
	m, err := w.Commit(ctx, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Streams) != 1 || m.Streams[0].Bytes != int64(len("the whole stream")) || m.Totals.StoredBytes != m.Streams[0].Bytes {
		t.Errorf("streams %+v, stored bytes %d: want the last put only", m.Streams, m.Totals.StoredBytes)
	}
}

// A manifest written before a plan left the run's traffic and rollout settings out (its plan's
// config holds them) still reads: its plan keeps what it selected and where its data lives, and
// none of the run's settings.
func TestManifestWithTheRunsSettingsReads(t *testing.T) {
	f, err := os.Open(filepath.Join("testdata", "manifest-v4-traffic.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := DecodeManifest(f, "run-20261101-090000-abc123")
	if err != nil {
		t.Fatal(err)
	}
	cfg := m.Plan.Config
	if len(cfg.Include.Namespaces) != 1 || len(cfg.Databases) != 1 || cfg.Databases[0].Workload != "statefulset/mariadb" ||
		cfg.StorageClassMap["gp3"] != "standard" || len(m.Objects) != 1 {
		t.Fatalf("manifest read back as %+v, plan config %+v", m, cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("its plan's configuration: %v", err)
	}
	again, err := json.Marshal(m.Plan)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(again), "traffic") || strings.Contains(string(again), "rollout") || strings.Contains(string(again), "LB_TOKEN") {
		t.Errorf("the plan keeps the run's settings: %s", again)
	}
}

func TestChunkedVolumes(t *testing.T) {
	for _, c := range []struct {
		format                    string
		direct, encrypted, chunks bool
		err                       string
	}{
		{format: "", chunks: true},
		{format: "", direct: true, chunks: false},
		{format: "", encrypted: true, chunks: false},
		{format: FormatChunks, encrypted: true, chunks: true},
		{format: FormatTar, chunks: false},
		{format: FormatTar, direct: true, chunks: false},
		{format: FormatChunks, chunks: true},
		{format: FormatChunks, direct: true, err: "volume format chunks: chunks are read through exec: direct movers write tar"},
		{format: "zip", err: `volume format "zip": want tar or chunks`},
	} {
		chunks, err := ChunkedVolumes(c.format, c.direct, c.encrypted)
		switch {
		case c.err != "" && (err == nil || err.Error() != c.err || !badinput.Is(err)):
			t.Errorf("ChunkedVolumes(%q, direct %t): error %v, want bad input %q", c.format, c.direct, err, c.err)
		case c.err == "" && (err != nil || chunks != c.chunks):
			t.Errorf("ChunkedVolumes(%q, direct %t, encrypted %t) = %t, %v; want %t", c.format, c.direct, c.encrypted, chunks, err, c.chunks)
		}
	}
}

// TestCopyStreamChecksTheCopy: a stream copied from an earlier backup is recorded only when the
// copy has the size and SHA-256 the earlier manifest gives; the earlier backups are found by
// Recent, newest first, without their objects' list, of the same cluster only.
func TestCopyStreamChecksTheCopy(t *testing.T) {
	ctx := context.Background()
	store := newStore(t)
	cluster := plans.Cluster{UID: "kube-system-uid"}
	w1, err := Create(ctx, store, "b1", cluster, &plans.Plan{}, time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"buckets/b/kept", "buckets/b/damaged"} {
		if _, err := w1.Put(ctx, f, strings.NewReader("the object's bytes")); err != nil {
			t.Fatal(err)
		}
	}
	w1.AddObjects([]Object{{Version: "v1", Kind: "ConfigMap", Resource: "configmaps", Namespace: "a", Name: "c", SHA256: "x"}}, 10)
	m1, err := w1.Commit(ctx, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// The earlier backup's file is damaged after it was written: the same size, other bytes.
	if err := store.Put(ctx, Prefix("b1")+"buckets/b/damaged", strings.NewReader("the object's bytez")); err != nil {
		t.Fatal(err)
	}
	// Another cluster's backup, newer, is not one to continue from; nor one of no recorded cluster.
	for name, other := range map[string]plans.Cluster{"other": {UID: "another-uid"}, "unknown": {}} {
		w, err := Create(ctx, store, name, other, &plans.Plan{}, time.Now(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Commit(ctx, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	w2, err := Create(ctx, store, "b2", cluster, &plans.Plan{}, time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	prev := w2.Recent(ctx)
	if len(prev) != 1 || prev[0].Name != "b1" || prev[0].Manifest.Objects != nil || len(prev[0].Manifest.Streams) != 2 {
		t.Fatalf("Recent: %+v", prev)
	}
	streams := map[string]Stream{}
	for _, s := range m1.Streams {
		streams[s.Key] = s
	}
	if err := w2.CopyStream(ctx, "b1", streams["buckets/b/kept"]); err != nil {
		t.Fatalf("CopyStream of a sound file: %v", err)
	}
	if err := w2.CopyStream(ctx, "b1", streams["buckets/b/damaged"]); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("CopyStream of a damaged file: %v, want ErrCorrupt", err)
	}
	if err := w2.CopyStream(ctx, "b1", Stream{Key: "buckets/b/missing", Bytes: 1, SHA256: "x"}); !errors.Is(err, storage.ErrNotExist) {
		t.Fatalf("CopyStream of a missing file: %v, want ErrNotExist", err)
	}
	m2, err := w2.Commit(ctx, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(m2.Streams) != 1 || m2.Streams[0] != streams["buckets/b/kept"] {
		t.Fatalf("b2 records %+v, want the sound file alone, as b1 recorded it", m2.Streams)
	}
	r, err := Open(ctx, store, "b2", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.CheckFile(ctx, "buckets/b/kept"); err != nil {
		t.Fatalf("the copy: %v", err)
	}
	if _, err := Delete(ctx, store, "b1"); err != nil {
		t.Fatal(err)
	}
	if err := r.CheckFile(ctx, "buckets/b/kept"); err != nil {
		t.Fatalf("the copy after the earlier backup was deleted: %v", err)
	}
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	enc, err := Create(ctx, store, "b3", plans.Cluster{}, &plans.Plan{}, time.Now(), []string{id.Recipient().String()})
	if err != nil {
		t.Fatal(err)
	}
	if got := enc.Recent(ctx); got != nil {
		t.Errorf("an encrypted backup continues from %+v", got)
	}
	if err := enc.CopyStream(ctx, "b2", streams["buckets/b/kept"]); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("an encrypted backup's CopyStream: %v, want ErrUnsupported", err)
	}
}

// TestCommitNeedsItsHolds: a backup whose chunk repository writer no longer holds its lock (a
// prune may have deleted packs it references) is not recorded: no manifest, still incomplete.
func TestCommitNeedsItsHolds(t *testing.T) {
	ctx := context.Background()
	store := newStore(t)
	w, err := Create(ctx, store, "b1", plans.Cluster{Server: "https://blue"}, &plans.Plan{}, time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	released := false
	w.Hold(func(context.Context) error { released = true; return nil }, func() error { return errors.New("writer lock x was last renewed 31m0s ago") })
	if _, err := w.Commit(ctx, time.Now()); err == nil || !strings.Contains(err.Error(), "not recorded") {
		t.Fatalf("commit: %v, want it refused", err)
	}
	if infos, _ := List(ctx, store); len(infos) != 1 || infos[0].State != Incomplete {
		t.Fatalf("after the refused commit: %+v, want the backup incomplete", infos)
	}
	if err := w.Release(ctx); err != nil || !released {
		t.Fatalf("release: %v, released %v", err, released)
	}
}

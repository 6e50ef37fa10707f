package buckets

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/plans/config"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/storage"
)

// sseStore is a one-bucket S3 store (bkt) that answers a bucket's encryption as told and keeps,
// or not, the server-side encryption objects are put with.
type sseStore struct {
	mu sync.Mutex
	// objects: key -> body, sse header value
	body map[string]string
	sse  map[string]string
	// honourSSE: a PUT keeps the SSE header it was sent; otherwise the object is kept in clear
	honourSSE bool
	// encryption: how ?encryption is answered: "none", "denied", "listing"
	encryption string
	puts       []string
}

func (s *sseStore) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := r.URL.Query()
	xmlErr := func(status int, code string) {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(status)
		io.WriteString(w, `<Error><Code>`+code+`</Code><Message>x</Message></Error>`)
	}
	switch {
	case q.Has("location"):
		io.WriteString(w, `<LocationConstraint xmlns="http://s3.amazonaws.com/doc/2006-03-01/"></LocationConstraint>`)
	case q.Has("encryption"):
		switch s.encryption {
		case "denied":
			xmlErr(http.StatusForbidden, "AccessDenied")
		case "sse-s3":
			io.WriteString(w, `<ServerSideEncryptionConfiguration><Rule><ApplyServerSideEncryptionByDefault><SSEAlgorithm>AES256</SSEAlgorithm></ApplyServerSideEncryptionByDefault></Rule></ServerSideEncryptionConfiguration>`)
		case "listing": // a store that does not route ?encryption and lists the bucket
			w.Header().Set("Content-Type", "application/xml")
			io.WriteString(w, `<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>bkt</Name></ListBucketResult>`)
		default:
			xmlErr(http.StatusNotFound, "ServerSideEncryptionConfigurationNotFoundError")
		}
	case q.Has("versioning"):
		io.WriteString(w, `<VersioningConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/"/>`)
	case q.Has("tagging") && r.URL.Path != "/bkt" && r.URL.Path != "/bkt/":
		io.WriteString(w, `<Tagging><TagSet></TagSet></Tagging>`)
	case settingNone[firstQuery(r)] != "": // the bucket has none of its other settings
		xmlErr(http.StatusNotFound, settingNone[firstQuery(r)])
	case (r.URL.Path == "/bkt/" || r.URL.Path == "/bkt") && q.Get("list-type") == "2":
		w.Header().Set("Content-Type", "application/xml")
		var sb strings.Builder
		for k, v := range s.body {
			fmt.Fprintf(&sb, `<Contents><Key>%s</Key><LastModified>2026-12-01T10:00:00.000Z</LastModified><ETag>"x"</ETag><Size>%d</Size></Contents>`, k, len(v))
		}
		io.WriteString(w, `<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>bkt</Name><IsTruncated>false</IsTruncated>`+sb.String()+`</ListBucketResult>`)
	case r.URL.Path == "/bkt/" || r.URL.Path == "/bkt":
		w.WriteHeader(http.StatusOK)
	case r.Method == http.MethodPut:
		key := strings.TrimPrefix(r.URL.Path, "/bkt/")
		io.Copy(io.Discard, r.Body)
		// the test's objects are known: keep the decoded length from the header
		s.body[key] = ""
		s.puts = append(s.puts, key+" sse="+r.Header.Get("X-Amz-Server-Side-Encryption"))
		if s.honourSSE {
			s.sse[key] = r.Header.Get("X-Amz-Server-Side-Encryption")
		} else {
			delete(s.sse, key)
		}
		w.Header().Set("ETag", `"x"`)
	default:
		key := strings.TrimPrefix(r.URL.Path, "/bkt/")
		b, ok := s.body[key]
		if !ok {
			xmlErr(404, "NoSuchKey")
			return
		}
		w.Header().Set("ETag", `"x"`)
		w.Header().Set("Last-Modified", time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC).Format(http.TimeFormat))
		if v := s.sse[key]; v != "" {
			w.Header().Set("X-Amz-Server-Side-Encryption", v)
		}
		w.Header().Set("Content-Length", fmt.Sprint(len(b)))
		if r.Method != http.MethodHead {
			io.WriteString(w, b)
		}
	}
}

// backupOf backs up the bucket of src into a new backup on local disk.
func backupOf(t *testing.T, src *sseStore) (*snapshot.Reader, error) {
	srv := httptest.NewServer(src)
	t.Cleanup(srv.Close)
	ctx := context.Background()
	store, err := storage.NewFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	plan := &plans.Plan{Buckets: []plans.DataItem{{Name: "bkt", Endpoint: srv.URL, Found: true}}}
	w, err := snapshot.Create(ctx, store, "b1", plans.Cluster{}, plan, time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := (Copies{Plan: plan}).Capture(ctx, w); err != nil {
		return nil, err
	}
	if _, err := w.Commit(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	return snapshot.Open(ctx, store, "b1", nil)
}

// TestServerSideEncryptionOfOddStores: a target that will not say how it encrypts a bucket is no
// difference for a backup whose bucket had no default encryption; a store that answers with
// something else has none; a target that takes an object's encryption and ignores it gets the
// object's item failed, not restored.
func TestServerSideEncryptionOfOddStores(t *testing.T) {
	ctx := context.Background()
	target := func(t *testing.T, r *snapshot.Reader, s *sseStore) *snapshot.Report {
		srv := httptest.NewServer(s)
		t.Cleanup(srv.Close)
		r.Manifest.Plan.Config = config.Planning{Buckets: []config.Bucket{{Name: "bkt", Endpoint: srv.URL}}}
		return &snapshot.Report{}
	}
	t.Run("verify where the target will not say", func(t *testing.T) {
		r, err := backupOf(t, &sseStore{body: map[string]string{"k": "data"}, sse: map[string]string{}, honourSSE: true})
		if err != nil {
			t.Fatal(err)
		}
		rep := target(t, r, &sseStore{body: map[string]string{"k": "data"}, sse: map[string]string{}, honourSSE: true, encryption: "denied"})
		if err := (Copies{}).Verify(ctx, r, rep); err != nil || len(rep.Items) > 0 {
			t.Errorf("verify = %v, items %+v; want nothing named", err, rep.Items)
		}
	})
	t.Run("a store that answers with a listing", func(t *testing.T) {
		r, err := backupOf(t, &sseStore{body: map[string]string{"k": "data"}, sse: map[string]string{}, honourSSE: true, encryption: "listing"})
		if err != nil {
			t.Fatalf("backup: %v", err)
		}
		if s, err := readSettingsFile(ctx, r, r.Manifest.Buckets[0]); err != nil || s.Encryption != nil || len(s.Unread) > 0 {
			t.Errorf("settings %+v (%v); want no encryption, nothing unread", s, err)
		}
	})
	t.Run("a target that ignores an object's encryption", func(t *testing.T) {
		r, err := backupOf(t, &sseStore{body: map[string]string{"k": "data"}, sse: map[string]string{"k": "AES256"}, honourSSE: true})
		if err != nil {
			t.Fatal(err)
		}
		ignoring := &sseStore{body: map[string]string{}, sse: map[string]string{}}
		rep := target(t, r, ignoring)
		if err := (Copies{}).Restore(ctx, r, rep); err != nil {
			t.Fatal(err)
		}
		if len(rep.Items) != 1 || rep.Items[0].Status != snapshot.StatusFailed || !strings.Contains(rep.Items[0].Detail, "encrypted by none, not AES256") {
			t.Errorf("restore into a store that ignores encryption: items %+v; want bkt/k failed, naming it", rep.Items)
		}
	})
}

package buckets

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/plans/config"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/storage"
	"github.com/minio/minio-go/v7"
)

func TestHistoryCounts(t *testing.T) {
	current := minio.ObjectInfo{Key: "k", IsLatest: true}
	earlier := minio.ObjectInfo{Key: "k"}
	marker := minio.ObjectInfo{Key: "gone", IsLatest: true, IsDeleteMarker: true}
	oldMarker := minio.ObjectInfo{Key: "gone", IsDeleteMarker: true}
	for _, c := range []struct {
		name    string
		listing []minio.ObjectInfo
		want    history
		says    string
	}{
		{"nothing", nil, history{}, "0 earlier versions"},
		{"current versions only", []minio.ObjectInfo{current, current}, history{}, "0 earlier versions"},
		{"one overwrite", []minio.ObjectInfo{current, earlier}, history{earlier: 1}, "1 earlier version"},
		{"a deleted object: its bytes and its marker", []minio.ObjectInfo{marker, earlier}, history{earlier: 1, markers: 1}, "1 earlier version and 1 delete marker"},
		{"a marker alone", []minio.ObjectInfo{marker}, history{markers: 1}, "1 delete marker"},
		{"markers current and not", []minio.ObjectInfo{marker, oldMarker, earlier, earlier}, history{earlier: 2, markers: 2}, "2 earlier versions and 2 delete markers"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var h history
			for _, o := range c.listing {
				h.add(o)
			}
			if h != c.want || h.String() != c.says || h.empty() != (c.want == history{}) {
				t.Errorf("counted %+v (%q, empty %t), want %+v (%q)", h, h, h.empty(), c.want, c.says)
			}
		})
	}
}

func TestHistoryReason(t *testing.T) {
	for _, c := range []struct {
		name                string
		versioning, refused string
		h                   history
		want, not           []string
	}{
		{"counted", "Enabled", "", history{earlier: 2, markers: 1},
			[]string{"versioning Enabled", "holds 2 earlier versions and 1 delete marker", "current version only", "versions: current"}, []string{"listed"}},
		{"suspended", "Suspended", "", history{earlier: 1},
			[]string{"versioning Suspended", "holds 1 earlier version:", "versions: current"}, nil},
		{"the store will not list them", "Enabled", "AccessDenied", history{},
			[]string{"versioning Enabled", "does not let them be listed (AccessDenied)", "s3:ListBucketVersions", "versions: current"}, []string{"holds 0"}},
		{"versioning unread", "", "", history{markers: 3},
			[]string{"may keep versions", "could not be read", "holds 3 delete markers"}, []string{"versioning )"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := historyReason(c.versioning, c.refused, c.h)
			for _, s := range c.want {
				if !strings.Contains(got, s) {
					t.Errorf("%q does not say %q", got, s)
				}
			}
			for _, s := range c.not {
				if strings.Contains(got, s) {
					t.Errorf("%q says %q", got, s)
				}
			}
		})
	}
}

// versionsStore is an S3 server of the test's own, on loopback, with a bucket "history" that
// holds no current objects and whose versioning answer and versions listing the test sets.
type versionsStore struct {
	versioning string // "" for a bucket that never had it
	unread     bool   // AccessDenied to the read of the versioning
	versions   string // the <Version> and <DeleteMarker> elements of the listing
	refuse     bool   // AccessDenied to the listing of versions
	listed     atomic.Int32
}

func (s *versionsStore) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	xmlErr := func(status int, code string) {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(status)
		io.WriteString(w, `<Error><Code>`+code+`</Code><Message>`+code+`</Message></Error>`)
	}
	switch {
	case q.Has("location"):
		io.WriteString(w, `<LocationConstraint xmlns="http://s3.amazonaws.com/doc/2006-03-01/"></LocationConstraint>`)
	case q.Has("versioning") && s.unread:
		xmlErr(http.StatusForbidden, "AccessDenied")
	case q.Has("versioning"):
		status := ""
		if s.versioning != "" {
			status = "<Status>" + s.versioning + "</Status>"
		}
		io.WriteString(w, `<VersioningConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">`+status+`</VersioningConfiguration>`)
	case q.Has("versions"):
		s.listed.Add(1)
		if s.refuse {
			xmlErr(http.StatusForbidden, "AccessDenied")
			return
		}
		w.Header().Set("Content-Type", "application/xml")
		io.WriteString(w, `<ListVersionsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>history</Name><Prefix></Prefix><KeyMarker></KeyMarker><VersionIdMarker></VersionIdMarker><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>`+
			s.versions+`</ListVersionsResult>`)
	case settingNone[firstQuery(r)] != "":
		xmlErr(http.StatusNotFound, settingNone[firstQuery(r)])
	case q.Get("list-type") == "2":
		w.Header().Set("Content-Type", "application/xml")
		io.WriteString(w, `<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>history</Name><KeyCount>0</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated></ListBucketResult>`)
	case r.URL.Path == "/history/" || r.URL.Path == "/history":
		w.WriteHeader(http.StatusOK) // the bucket exists
	default:
		xmlErr(http.StatusNotFound, "NoSuchKey")
	}
}

// TestCaptureListsABucketsHistory: a bucket that keeps versions is listed once more, with its
// versions; its earlier versions and delete markers are one skipped item with their counts,
// unless its configuration says versions: current, which has them logged only. A bucket without
// versioning is not listed with versions at all.
func TestCaptureListsABucketsHistory(t *testing.T) {
	const at = "<LastModified>2026-12-01T10:00:00.000Z</LastModified>"
	const deletedObject = `<DeleteMarker><Key>runs/gone.json</Key><VersionId>m1</VersionId><IsLatest>true</IsLatest>` + at + `</DeleteMarker>` +
		`<Version><Key>runs/gone.json</Key><VersionId>v1</VersionId><IsLatest>false</IsLatest>` + at + `<ETag>"e1"</ETag><Size>4</Size><StorageClass>STANDARD</StorageClass></Version>`
	const overwritten = `<Version><Key>model.bin</Key><VersionId>v1</VersionId><IsLatest>false</IsLatest>` + at + `<ETag>"e2"</ETag><Size>8</Size><StorageClass>STANDARD</StorageClass></Version>`
	for _, c := range []struct {
		name      string
		store     *versionsStore
		versions  string // the bucket's configuration
		listed    bool   // with versions
		skipped   []string
		logged    []string
		notLogged []string
	}{
		{name: "no versioning", store: &versionsStore{versions: deletedObject}, notLogged: []string{"versions"}},
		{name: "versioned without history", store: &versionsStore{versioning: "Enabled"}, listed: true, notLogged: []string{"versions"}},
		{name: "versioned with history", store: &versionsStore{versioning: "Enabled", versions: deletedObject + overwritten}, listed: true,
			skipped: []string{"versioning Enabled", "2 earlier versions and 1 delete marker"}, logged: []string{"earlierVersions=2", "deleteMarkers=1"}},
		{name: "suspended with history", store: &versionsStore{versioning: "Suspended", versions: overwritten}, listed: true,
			skipped: []string{"versioning Suspended", "1 earlier version:"}, logged: []string{"earlierVersions=1", "deleteMarkers=0"}},
		{name: "versions: current", store: &versionsStore{versioning: "Enabled", versions: deletedObject + overwritten}, versions: config.VersionsCurrent, listed: true,
			logged: []string{"earlierVersions=2", "deleteMarkers=1", "versions=current"}},
		{name: "versioning unread", store: &versionsStore{unread: true, versions: overwritten}, listed: true,
			skipped: []string{"may keep versions", "1 earlier version:"}, logged: []string{"versioning=unread", "earlierVersions=1"}},
		{name: "versioning unread, nothing kept", store: &versionsStore{unread: true}, listed: true},
		{name: "the store will not list them", store: &versionsStore{versioning: "Enabled", refuse: true}, listed: true,
			skipped: []string{"does not let them be listed (AccessDenied)"}, logged: []string{"code=AccessDenied"}},
		{name: "the store will not list them, versions: current", store: &versionsStore{versioning: "Enabled", refuse: true}, versions: config.VersionsCurrent, listed: true,
			logged: []string{"code=AccessDenied", "versions=current"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(c.store)
			defer srv.Close()
			ctx := context.Background()
			store, err := storage.NewFile(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			plan := &plans.Plan{Buckets: []plans.DataItem{{Name: "history", Endpoint: srv.URL, Found: true}}}
			plan.Config.Buckets = []config.Bucket{{Name: "history", Endpoint: srv.URL, Versions: c.versions}}
			w, err := snapshot.Create(ctx, store, "b1", plans.Cluster{}, plan, time.Now(), nil)
			if err != nil {
				t.Fatal(err)
			}
			var log bytes.Buffer
			if err := (Copies{Plan: plan, Log: slog.New(slog.NewTextHandler(&log, nil))}).Capture(ctx, w); err != nil {
				t.Fatalf("capture: %v", err)
			}
			m, err := w.Commit(ctx, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if listed := c.store.listed.Load() > 0; listed != c.listed {
				t.Errorf("listed with versions: %t, want %t", listed, c.listed)
			}
			var items []snapshot.Skipped
			for _, s := range m.Skipped {
				if s.Name != "history versioning" || !c.store.unread { // an unread setting is an item of its own
					items = append(items, s)
				}
			}
			switch {
			case len(c.skipped) == 0 && len(items) > 0:
				t.Errorf("skipped %+v, want nothing", items)
			case len(c.skipped) > 0 && (len(items) != 1 || items[0].Kind != "bucket" || items[0].Name != "history earlier versions"):
				t.Errorf("skipped %+v, want the bucket's earlier versions alone", items)
			case len(c.skipped) > 0:
				for _, s := range c.skipped {
					if !strings.Contains(items[0].Reason, s) {
						t.Errorf("the skipped item says %q, not %q", items[0].Reason, s)
					}
				}
			}
			for _, s := range c.logged {
				if !strings.Contains(log.String(), s) {
					t.Errorf("the log does not say %q:\n%s", s, log.String())
				}
			}
			for _, s := range c.notLogged {
				if strings.Contains(log.String(), s) {
					t.Errorf("the log says %q:\n%s", s, log.String())
				}
			}
		})
	}
}

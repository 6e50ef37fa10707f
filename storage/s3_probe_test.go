package storage_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/storage"
)

// lenientS3 is an S3 server that stores nothing but ETags and, as some S3-compatible servers do,
// ignores the conditions it is not told to honour.
type lenientS3 struct {
	honourNoneMatch, honourMatch bool

	mu    sync.Mutex
	etags map[string]string
	n     int
}

func (s *lenientS3) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch r.Method {
	case http.MethodHead: // HeadBucket
	case http.MethodDelete:
		delete(s.etags, r.URL.Path)
		w.WriteHeader(http.StatusNoContent)
	case http.MethodPut:
		etag, exists := s.etags[r.URL.Path]
		if s.honourNoneMatch && r.Header.Get("If-None-Match") == "*" && exists ||
			s.honourMatch && r.Header.Get("If-Match") != "" && r.Header.Get("If-Match") != etag {
			w.WriteHeader(http.StatusPreconditionFailed)
			fmt.Fprint(w, `<Error><Code>PreconditionFailed</Code></Error>`)
			return
		}
		s.n++
		s.etags[r.URL.Path] = fmt.Sprintf(`"%032d"`, s.n)
		w.Header().Set("ETag", s.etags[r.URL.Path])
	default:
		w.WriteHeader(http.StatusNotImplemented)
	}
}

// Opening S3 storage whose server ignores If-None-Match or If-Match is refused as bad input that
// says which condition and why ferry needs it; one that honours both opens.
func TestS3RefusesServerWithoutConditionalWrites(t *testing.T) {
	for _, tc := range []struct {
		name             string
		noneMatch, match bool
		want             string
	}{
		{"ignores both", false, false, "does not honour If-None-Match"},
		{"ignores If-Match", true, false, "does not honour If-Match"},
		{"honours both", true, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(&lenientS3{honourNoneMatch: tc.noneMatch, honourMatch: tc.match, etags: map[string]string{}})
			defer srv.Close()
			_, err := storage.NewS3(context.Background(), storage.S3Config{Bucket: "b", Endpoint: srv.URL, PathStyle: true, Region: "us-east-1",
				Credentials: credentials.NewStaticCredentialsProvider("k", "s", "")})
			if tc.want == "" {
				if err != nil {
					t.Fatalf("NewS3 on a server that honours both conditions: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "ferry needs S3 conditional writes") || !badinput.Is(err) {
				t.Fatalf("NewS3 = %v; want bad input saying it %s and why ferry needs conditional writes", err, tc.want)
			}
		})
	}
}

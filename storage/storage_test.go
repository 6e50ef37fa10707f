package storage

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/ferrykube/ferry/internal/badinput"
)

func TestOpenRejectsBadURLs(t *testing.T) {
	for _, tc := range []struct {
		url, want string
	}{
		{"gs://bucket/x", `unknown scheme "gs"`},
		{"s3:/bucket/x", "want file://PATH, s3://BUCKET/PREFIX or a folder path"},
		{"s3:bucket", "want file://PATH, s3://BUCKET/PREFIX or a folder path"},
		{"file://", "no folder"},
		{"s3:///prefix", "no bucket"},
		{"s3://user:s3cr3t@bucket/p", "credentials do not belong in the URL"},
		{"s3://AKIDS3CR3T@bucket/p", "credentials do not belong in the URL"},
		{"s3://user:s3cr3t@bucket/p%zz", `"s3://REDACTED@bucket/p%zz": invalid URL escape`},
		{"s3:user:s3cr3t@bucket/p", `"s3:REDACTED@bucket/p": want file://PATH`},
		{"s3://bucket/p?endpoint=http://user:s3cr3t@127.0.0.1:9000", "endpoint=: credentials do not belong in the URL"},
		{"s3://bucket/p?endpoint=user:s3cr3t@127.0.0.1:9000&region=r", "endpoint=: credentials do not belong in the URL"},
		{"gs://user:s3cr3t@bucket/x", `unknown scheme "gs"`},
		{"s3://bucket/p?endpoint=127.0.0.1:9000", "endpoint="},
		{"s3://bucket/p?path-style=maybe", "path-style="},
		{"s3://bucket/p?part-size=1Mi", "between 5Mi and 5Gi"},
		{"s3://bucket/p?part-size=lots", "part-size="},
		{"s3://bucket/p?concurrency=0", "concurrency="},
		{"s3://bucket/p?regoin=eu-west-1", `unknown parameter "regoin"`},
	} {
		t.Run(tc.url, func(t *testing.T) {
			_, err := Open(context.Background(), tc.url)
			if err == nil || !badinput.Is(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open(%q) = %v, want a bad-input error naming %q", tc.url, err, tc.want)
			}
			// A refusal of credentials must not print them into every log.
			if strings.Contains(err.Error(), "s3cr3t") || strings.Contains(err.Error(), "S3CR3T") {
				t.Errorf("Open(%q)'s error shows the credentials: %v", tc.url, err)
			}
			if CheckURL(tc.url) == nil {
				t.Errorf("CheckURL(%q) accepts what Open refuses", tc.url)
			}
		})
	}
}

func TestParseS3URL(t *testing.T) {
	b, err := Open(context.Background(), "file://"+t.TempDir())
	if err != nil || !strings.HasPrefix(b.String(), "file://") {
		t.Fatalf("Open(file://...) = %v, %v", b, err)
	}
	u := "s3://backups/team/a?endpoint=https://s3.example:9000&region=eu-west-1&path-style=true&insecure-skip-verify=true&part-size=64Mi&concurrency=8&profile=ops"
	cfg, err := parseS3URL(mustParse(t, u))
	if err != nil {
		t.Fatal(err)
	}
	want := S3Config{Bucket: "backups", Prefix: "team/a", Endpoint: "https://s3.example:9000", Region: "eu-west-1",
		PathStyle: true, InsecureSkipVerify: true, PartSize: 64 << 20, Concurrency: 8, Profile: "ops"}
	if cfg != want {
		t.Fatalf("parseS3URL(%q) = %+v, want %+v", u, cfg, want)
	}
}

func TestCheckKey(t *testing.T) {
	for key, ok := range map[string]bool{
		"backups/b1/ferry-manifest.json": true, "a": true, "a.b/c-d_e": true,
		"": false, "/a": false, "a/": false, "a//b": false, "./a": false, "a/./b": false, "../a": false,
		"a/../b": false, `a\b`: false, "a/.ferry-tmp-1": false,
	} {
		if err := checkKey(key); (err == nil) != ok {
			t.Errorf("checkKey(%q) = %v, want ok=%v", key, err, ok)
		}
	}
}

func mustParse(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

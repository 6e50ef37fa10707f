package buckets

import (
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/ferrykube/ferry/snapshot"
	"github.com/minio/minio-go/v7"
)

func TestSettingsDifferences(t *testing.T) {
	const policy = `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":["*"]},"Action":["s3:GetObject"],"Resource":["arn:aws:s3:::b/public/*"]}]}`
	// The same policy as another store lays it out: one-element lists as values, keys reordered.
	const policyElsewhere = `{"Statement":[{"Resource":"arn:aws:s3:::b/public/*","Action":"s3:GetObject","Principal":{"AWS":"*"},"Effect":"Allow"}],"Version":"2012-10-17"}`
	const lifecycle = `<LifecycleConfiguration><Rule><ID>tmp</ID><Status>Enabled</Status><Filter><Prefix>tmp/</Prefix></Filter><Expiration><Days>7</Days></Expiration></Rule></LifecycleConfiguration>`
	const lifecycle30 = `<LifecycleConfiguration><Rule><ID>tmp</ID><Status>Enabled</Status><Filter><Prefix>tmp/</Prefix></Filter><Expiration><Days>30</Days></Expiration></Rule></LifecycleConfiguration>`
	full := snapshot.BucketSettings{Versioning: "Enabled", Policy: policy, Lifecycle: lifecycle,
		Tags: map[string]string{"team": "ml", "cost": "secret-value"}, ObjectLock: &snapshot.ObjectLock{Mode: "GOVERNANCE", Validity: 1, Unit: "DAYS"}}
	with := func(f func(*snapshot.BucketSettings)) snapshot.BucketSettings {
		s := full
		s.Tags = map[string]string{"team": "ml", "cost": "secret-value"}
		l := *full.ObjectLock
		s.ObjectLock = &l
		f(&s)
		return s
	}
	for _, tc := range []struct {
		name      string
		want, got snapshot.BucketSettings
		diffs     []string // one substring per difference, in order
	}{
		{"the same", full, with(func(*snapshot.BucketSettings) {}), nil},
		{"none and none", snapshot.BucketSettings{}, snapshot.BucketSettings{}, nil},
		{"a policy laid out otherwise", full, with(func(s *snapshot.BucketSettings) { s.Policy = policyElsewhere }), nil},
		{"anyone as a principal of its own", full, with(func(s *snapshot.BucketSettings) {
			s.Policy = strings.Replace(policyElsewhere, `{"AWS":"*"}`, `"*"`, 1)
		}), nil},
		{"lifecycle rules in S3's namespace", full, with(func(s *snapshot.BucketSettings) {
			s.Lifecycle = strings.Replace(lifecycle, "<LifecycleConfiguration>", `<LifecycleConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">`, 1)
		}), nil},
		{"suspended is as never versioned", snapshot.BucketSettings{Versioning: "Suspended"}, snapshot.BucketSettings{}, nil},
		{"everything missing", full, snapshot.BucketSettings{}, []string{"object lock: the backup's bucket has it", "versioning: backup Enabled, target off",
			"policy: set on the backup's bucket, not on the target's", "lifecycle: set on the backup's", "tags: cost, team differ"}},
		{"the target's own", snapshot.BucketSettings{}, full, []string{"object lock: the target's bucket has it", "versioning: backup off, target Enabled",
			"policy: set on the target's bucket", "lifecycle: set on the target's", "tags: cost, team differ"}},
		{"changed", full, with(func(s *snapshot.BucketSettings) {
			s.Policy = strings.Replace(policy, "public", "private", 1)
			s.Lifecycle = lifecycle30
			s.Tags["cost"] = "other"
			s.ObjectLock.Mode = "COMPLIANCE"
		}), []string{"object lock's default retention: backup GOVERNANCE 1 DAYS, target COMPLIANCE 1 DAYS", "policy: differs", "lifecycle: differs", "tags: cost differ"}},
		{"a tag more on the target", full, with(func(s *snapshot.BucketSettings) { s.Tags["extra"] = "x" }), []string{"tags: extra differ"}},
		{"unread settings are not compared", snapshot.BucketSettings{Unread: []string{"policy", "tags"}}, full,
			[]string{"object lock", "versioning", "lifecycle"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := settingsDifferences(tc.want, tc.got)
			if len(got) != len(tc.diffs) {
				t.Fatalf("differences %q, want %d: %q", got, len(tc.diffs), tc.diffs)
			}
			for i, d := range tc.diffs {
				if !strings.Contains(got[i], d) {
					t.Errorf("difference %d is %q, want it to say %q", i, got[i], d)
				}
			}
			if joined := strings.Join(got, "; "); strings.Contains(joined, "secret-value") || strings.Contains(joined, "arn:aws") {
				t.Errorf("the differences show a tag's value or the policy: %s", joined)
			}
		})
	}
}

// TestCodeOfWrappedErrors: a store's error code is found through the wrapping that names the
// object, so that a refusal is told from a broken connection.
func TestCodeOfWrappedErrors(t *testing.T) {
	denied := minio.ErrorResponse{Code: "AccessDenied", Message: "Access Denied."}
	if got := code(fmt.Errorf("read the tags of %s: %w", "k", denied)); got != "AccessDenied" {
		t.Errorf("code of a wrapped refusal = %q", got)
	}
	if got := code(fmt.Errorf("read: %w", io.ErrUnexpectedEOF)); got != "" {
		t.Errorf("code of a broken connection = %q", got)
	}
	if got := code(nil); got != "" {
		t.Errorf("code(nil) = %q", got)
	}
}

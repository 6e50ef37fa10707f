package integration

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/ferrykube/ferry/integration/testbed"
	"github.com/ferrykube/ferry/snapshot"
)

// anonymousGet reads an object of a testbed MinIO without credentials, as a browser or a
// pipeline's UI reading a public artifact does, and returns the HTTP status.
func anonymousGet(t *testing.T, m *testbed.MinIO, bucket, key string) int {
	t.Helper()
	resp, err := http.Get(m.Endpoint + "/" + bucket + "/" + key)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestBucketSettingsMove backs up two buckets of blue's MinIO whose settings decide how the
// platform's users reach and keep their data: one versioned, with a policy that lets anyone
// read public/, a lifecycle rule that expires tmp/, and tags; one with object lock and a default
// retention, as records kept for compliance are, holding objects locked on their own (a longer
// retention, a legal hold). It restores them onto green's MinIO, which has neither bucket, and
// compares green's settings and objects' locks with blue's through the S3 API. Then verify, and
// a policy removed and a tag changed on green, which verify names (the tag by key only) and a
// second restore puts back.
func TestBucketSettingsMove(t *testing.T) {
	testbed.Require(t, tb)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const blueNS, greenNS = "bucket-settings", "bucket-settings-green"
	const open, records, tagCanary = "bs-artifacts", "bs-records", "canary-5e0f7a21"
	serveMinIO(t, "blue", blueNS)
	serveMinIO(t, "green", greenNS)
	blueMinIO, greenMinIO := tb.MinIO["blue"], tb.MinIO["green"]
	blue := blueMinIO.S3Client()
	must := func(what string, _ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	put := func(bucket, key, body string) {
		t.Helper()
		out, err := blue.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader(body)})
		must("put "+key, out, err)
	}

	out, err := blue.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(open)})
	must("create "+open, out, err)
	v, err := blue.PutBucketVersioning(ctx, &s3.PutBucketVersioningInput{Bucket: aws.String(open),
		VersioningConfiguration: &s3types.VersioningConfiguration{Status: s3types.BucketVersioningStatusEnabled}})
	must("versioning", v, err)
	p, err := blue.PutBucketPolicy(ctx, &s3.PutBucketPolicyInput{Bucket: aws.String(open), Policy: aws.String(fmt.Sprintf(
		`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":["*"]},"Action":["s3:GetObject"],"Resource":["arn:aws:s3:::%s/public/*"]}]}`, open))})
	must("policy", p, err)
	l, err := blue.PutBucketLifecycleConfiguration(ctx, &s3.PutBucketLifecycleConfigurationInput{Bucket: aws.String(open),
		LifecycleConfiguration: &s3types.BucketLifecycleConfiguration{Rules: []s3types.LifecycleRule{{
			ID: aws.String("expire-scratch"), Status: s3types.ExpirationStatusEnabled,
			Filter:                      &s3types.LifecycleRuleFilter{Prefix: aws.String("tmp/")},
			Expiration:                  &s3types.LifecycleExpiration{Days: aws.Int32(7)},
			NoncurrentVersionExpiration: &s3types.NoncurrentVersionExpiration{NoncurrentDays: aws.Int32(30)},
		}}}})
	must("lifecycle", l, err)
	tg, err := blue.PutBucketTagging(ctx, &s3.PutBucketTaggingInput{Bucket: aws.String(open), Tagging: &s3types.Tagging{TagSet: []s3types.Tag{
		{Key: aws.String("team"), Value: aws.String("ml")}, {Key: aws.String("cost-center"), Value: aws.String(tagCanary)}}}})
	must("tags", tg, err)
	put(open, "public/logo.txt", "logo")
	put(open, "data/model.bin", "model v1")
	put(open, "data/model.bin", "model v2") // v1 is now an earlier version
	// Objects carry tags of their own, which lifecycle rules and reports select by.
	const tagged = "data/model.bin"
	pt, err := blue.PutObjectTagging(ctx, &s3.PutObjectTaggingInput{Bucket: aws.String(open), Key: aws.String(tagged),
		Tagging: &s3types.Tagging{TagSet: []s3types.Tag{{Key: aws.String("stage"), Value: aws.String("prod")}, {Key: aws.String("reviewer"), Value: aws.String(tagCanary)}}}})
	must("tag "+tagged, pt, err)
	put(open, "tmp/scratch", "scratch")

	out, err = blue.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(records), ObjectLockEnabledForBucket: aws.Bool(true)})
	must("create "+records, out, err)
	ol, err := blue.PutObjectLockConfiguration(ctx, &s3.PutObjectLockConfigurationInput{Bucket: aws.String(records),
		ObjectLockConfiguration: &s3types.ObjectLockConfiguration{ObjectLockEnabled: s3types.ObjectLockEnabledEnabled,
			Rule: &s3types.ObjectLockRule{DefaultRetention: &s3types.DefaultRetention{Mode: s3types.ObjectLockRetentionModeGovernance, Days: aws.Int32(1)}}}})
	must("object lock", ol, err)
	put(records, "2026/ledger.csv", "id,amount\n1,100\n")
	// Objects locked on their own: a retention longer than the bucket's default, a legal hold.
	const retained, held = "2026/audit.log", "2026/claim-118.pdf"
	until := time.Now().Add(72 * time.Hour).UTC().Truncate(time.Second)
	ro, err := blue.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(records), Key: aws.String(retained), Body: strings.NewReader("audited\n"),
		ObjectLockMode: s3types.ObjectLockModeGovernance, ObjectLockRetainUntilDate: aws.Time(until)})
	must("put "+retained, ro, err)
	ho, err := blue.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(records), Key: aws.String(held), Body: strings.NewReader("%PDF-1.7\n"),
		ObjectLockLegalHoldStatus: s3types.ObjectLockLegalHoldStatusOn})
	must("put "+held, ho, err)

	if code := anonymousGet(t, blueMinIO, open, "public/logo.txt"); code != http.StatusOK {
		t.Fatalf("blue's policy does not let anyone read public/: HTTP %d", code)
	}
	want := map[string]map[string]string{open: bucketSettings(t, blueMinIO.S3Client(), open), records: bucketSettings(t, blueMinIO.S3Client(), records)}
	t.Logf("blue's settings: %v", want)

	config := filepath.Join(t.TempDir(), "ferry.yaml")
	var cfg strings.Builder
	cfg.WriteString("include: {namespaces: [" + blueNS + "]}\nbuckets:\n")
	for _, b := range []string{open, records} {
		cfg.WriteString("- name: " + b + "\n  namespace: " + blueNS + "\n  workload: deployment/minio\n  port: 9000\n  secret: {name: artifact-keys, accessKeyKey: accesskey, secretKeyKey: secretkey}\n")
		cfg.WriteString("  versions: current\n") // its earlier version is left out knowingly: logged, not skipped
	}
	if err := os.WriteFile(config, []byte(cfg.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	url := backupMinIO(t, "bucketsettings")
	const backup = "bucket-settings"
	code, stdout, errOut := runFerry(t, "--storage", url, "backup", "--from", "blue", "-f", config, "--name", backup)
	if code != 0 {
		t.Fatalf("ferry backup exited %d\nstdout: %.2000s\nstderr: %.2000s", code, stdout, errOut)
	}
	// Only the current version of each object is copied: the backup says so.
	if !strings.Contains(errOut, "earlier versions") || strings.Contains(errOut+stdout, tagCanary) {
		t.Errorf("the backup of a versioned bucket does not say that earlier versions are not copied, or shows a tag's value:\n%.3000s", errOut)
	}

	same := func(t *testing.T, when string) {
		t.Helper()
		for b, settings := range want {
			if got := bucketSettings(t, greenMinIO.S3Client(), b); !reflect.DeepEqual(got, settings) {
				t.Errorf("%s: green's bucket %s has settings\n%v\nblue's\n%v", when, b, got, settings)
			}
		}
		if b, g := objectTags(t, blueMinIO, open, tagged), objectTags(t, greenMinIO, open, tagged); !reflect.DeepEqual(b, g) {
			t.Errorf("%s: green's %s has tags %v, blue's %v", when, tagged, g, b)
		}
		for _, key := range []string{"2026/ledger.csv", retained, held} {
			if b, g := objectLock(t, blueMinIO, records, key), objectLock(t, greenMinIO, records, key); !g.holdsAsLongAs(b) {
				t.Errorf("%s: green's %s/%s is locked %+v, blue's %+v", when, records, key, g, b)
			}
		}
		if code := anonymousGet(t, greenMinIO, open, "public/logo.txt"); code != http.StatusOK {
			t.Errorf("%s: anyone may read %s/public/ on blue, on green HTTP %d", when, open, code)
		}
		if code := anonymousGet(t, greenMinIO, open, "data/model.bin"); code != http.StatusForbidden {
			t.Errorf("%s: %s/data/ is private on blue, on green HTTP %d", when, open, code)
		}
	}
	report := func(t *testing.T, command string) (int, restoreReport) {
		t.Helper()
		code, rep, errOut := runReportCommand(t, "--storage", url, command, "--to", "green", "--backup", backup, "--namespace-map", blueNS+"="+greenNS)
		if strings.Contains(errOut, tagCanary) || strings.Contains(fmt.Sprint(rep), tagCanary) {
			t.Errorf("ferry %s shows a tag's value", command)
		}
		return code, rep
	}
	clean := func(t *testing.T, command string) {
		t.Helper()
		if code, rep := report(t, command); code != 0 {
			t.Fatalf("ferry %s exited %d: %s %s %+v", command, code, rep.Result, rep.Error, rep.Items)
		}
	}

	t.Run("a restore gives green's buckets blue's settings", func(t *testing.T) {
		clean(t, "restore")
		same(t, "after the restore")
		clean(t, "verify")
	})
	t.Run("settings changed on green are named by verify and put back", func(t *testing.T) {
		green := greenMinIO.S3Client()
		d, err := green.DeleteBucketPolicy(ctx, &s3.DeleteBucketPolicyInput{Bucket: aws.String(open)})
		must("delete green's policy", d, err)
		tg, err := green.PutBucketTagging(ctx, &s3.PutBucketTaggingInput{Bucket: aws.String(open), Tagging: &s3types.Tagging{TagSet: []s3types.Tag{
			{Key: aws.String("team"), Value: aws.String("ml")}, {Key: aws.String("cost-center"), Value: aws.String("other")}}}})
		must("change green's tags", tg, err)
		ot, err := green.PutObjectTagging(ctx, &s3.PutObjectTaggingInput{Bucket: aws.String(open), Key: aws.String(tagged),
			Tagging: &s3types.Tagging{TagSet: []s3types.Tag{{Key: aws.String("stage"), Value: aws.String("dev")}, {Key: aws.String("reviewer"), Value: aws.String(tagCanary)}}}})
		must("change the tags of green's "+tagged, ot, err)
		code, rep := report(t, "verify")
		details := map[string]string{}
		for _, it := range rep.Items {
			if it.Kind == "buckets" && it.Status == snapshot.StatusDifferent {
				details[it.Name] = it.Detail
			}
		}
		t.Logf("verify exited %d: %v", code, details)
		if d := details[open]; code == 0 || !strings.Contains(d, "policy") || !strings.Contains(d, "cost-center") {
			t.Errorf("verify exited %d and says %q of the bucket: want the policy and the tag cost-center named", code, d)
		}
		if d := details[open+"/"+tagged]; !strings.Contains(d, "tags differ: stage") {
			t.Errorf("verify says %q of %s: want its tag stage named", d, tagged)
		}
		// Only the object's tags differ: the restore gives it the backup's tags, not a new
		// version of the same bytes.
		before := versions(t, greenMinIO, open, tagged)
		clean(t, "restore")
		if after := versions(t, greenMinIO, open, tagged); after != before {
			t.Errorf("green's %s had %d versions before the restore, %d after", tagged, before, after)
		}
		same(t, "after a second restore")
		clean(t, "verify")
	})
	t.Run("a tag changed on blue moves with the next backup, which reuses the object", func(t *testing.T) {
		// Tagging an object changes neither its bytes, nor its ETag, nor its time.
		pt, err := blue.PutObjectTagging(ctx, &s3.PutObjectTaggingInput{Bucket: aws.String(open), Key: aws.String(tagged),
			Tagging: &s3types.Tagging{TagSet: []s3types.Tag{{Key: aws.String("stage"), Value: aws.String("retired")}}}})
		must("retag "+tagged, pt, err)
		const next = "bucket-settings-2"
		if code, stdout, errOut := runFerry(t, "--storage", url, "backup", "--from", "blue", "-f", config, "--name", next); code != 0 {
			t.Fatalf("ferry backup exited %d\nstdout: %.2000s\nstderr: %.2000s", code, stdout, errOut)
		}
		_, m := readManifest(t, url, next)
		for _, b := range m.Buckets {
			if b.Name == open && b.Reused == 0 {
				t.Errorf("the second backup read every object of %s again: the reuse is not what is tested", open)
			}
		}
		if code, rep, errOut := runReportCommand(t, "--storage", url, "restore", "--to", "green", "--backup", next, "--namespace-map", blueNS+"="+greenNS); code != 0 {
			t.Fatalf("ferry restore exited %d: %s %s %+v\n%.2000s", code, rep.Result, rep.Error, rep.Items, errOut)
		}
		if g := objectTags(t, greenMinIO, open, tagged); !reflect.DeepEqual(g, map[string]string{"stage": "retired"}) {
			t.Errorf("green's %s has tags %v after the next backup's restore, blue's stage=retired", tagged, g)
		}
	})
}

// lockOf is how an object is locked: its retention's mode and date, and its legal hold.
type lockOf struct {
	Mode      string
	Until     time.Time
	LegalHold string
}

// holdsAsLongAs says whether l locks an object as o does: the same mode and legal hold, and a
// retention that ends with o's, or less than a second after it (S3 takes dates to the second).
func (l lockOf) holdsAsLongAs(o lockOf) bool {
	d := l.Until.Sub(o.Until)
	return l.Mode == o.Mode && l.LegalHold == o.LegalHold && d >= 0 && d < time.Second
}

// objectLock reads how an object is locked through the S3 API.
func objectLock(t *testing.T, m *testbed.MinIO, bucket, key string) lockOf {
	t.Helper()
	ctx := context.Background()
	var lock lockOf
	r, err := m.S3Client().GetObjectRetention(ctx, &s3.GetObjectRetentionInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	switch {
	case err == nil && r.Retention != nil:
		lock.Mode, lock.Until = string(r.Retention.Mode), aws.ToTime(r.Retention.RetainUntilDate)
	case err != nil && !strings.Contains(err.Error(), "NoSuchObjectLockConfiguration"):
		t.Fatalf("retention of %s/%s: %v", bucket, key, err)
	}
	h, err := m.S3Client().GetObjectLegalHold(ctx, &s3.GetObjectLegalHoldInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	switch {
	case err == nil && h.LegalHold != nil:
		lock.LegalHold = string(h.LegalHold.Status)
	case err != nil && !strings.Contains(err.Error(), "NoSuchObjectLockConfiguration"):
		t.Fatalf("legal hold of %s/%s: %v", bucket, key, err)
	}
	return lock
}

// objectTags reads an object's tags through the S3 API.
func objectTags(t *testing.T, m *testbed.MinIO, bucket, key string) map[string]string {
	t.Helper()
	out, err := m.S3Client().GetObjectTagging(context.Background(), &s3.GetObjectTaggingInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("tags of %s/%s: %v", bucket, key, err)
	}
	tags := map[string]string{}
	for _, tag := range out.TagSet {
		tags[aws.ToString(tag.Key)] = aws.ToString(tag.Value)
	}
	return tags
}

// versions counts the versions an object of a versioned bucket has.
func versions(t *testing.T, m *testbed.MinIO, bucket, key string) int {
	t.Helper()
	out, err := m.S3Client().ListObjectVersions(context.Background(), &s3.ListObjectVersionsInput{Bucket: aws.String(bucket), Prefix: aws.String(key)})
	if err != nil {
		t.Fatalf("versions of %s/%s: %v", bucket, key, err)
	}
	n := 0
	for _, v := range out.Versions {
		if aws.ToString(v.Key) == key {
			n++
		}
	}
	return n
}

// TestBucketEncryptionMoves: blue's MinIO keeps two buckets encrypted at rest, as a platform's
// artifacts with data of its users are: one by its default encryption (SSE-KMS under the KMS's
// key), holding an object put without encryption of its own and one put with SSE-S3; one without
// a default, holding an object in clear and one put with SSE-KMS. A restore onto green's MinIO,
// whose KMS has a key of the same name, keeps each bucket's default and each object's encryption,
// as the independent checker reads them through the S3 API, and verify passes. A restore onto a
// MinIO without a KMS cannot encrypt: it fails, naming the buckets and objects, and puts none
// of what blue kept encrypted there in clear.
func TestBucketEncryptionMoves(t *testing.T) {
	testbed.Require(t, tb)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const blueNS, greenNS, plainNS = "bucket-sealed", "bucket-sealed-green", "bucket-sealed-plain"
	const sealed, mixed = "bs-sealed", "bs-mixed"
	serveMinIO(t, "blue", blueNS)
	serveMinIO(t, "green", greenNS)
	blueMinIO, greenMinIO := tb.MinIO["blue"], tb.MinIO["green"]
	blue := blueMinIO.S3Client()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	put := func(bucket, key, body string, sse s3types.ServerSideEncryption) {
		t.Helper()
		in := &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader(body), ServerSideEncryption: sse}
		if sse == s3types.ServerSideEncryptionAwsKms {
			in.SSEKMSKeyId = aws.String(testbed.KMSKey)
		}
		_, err := blue.PutObject(ctx, in)
		must("put "+bucket+"/"+key, err)
	}
	for _, b := range []string{sealed, mixed} {
		_, err := blue.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(b)})
		must("create "+b, err)
	}
	_, err := blue.PutBucketEncryption(ctx, &s3.PutBucketEncryptionInput{Bucket: aws.String(sealed), ServerSideEncryptionConfiguration: &s3types.ServerSideEncryptionConfiguration{
		Rules: []s3types.ServerSideEncryptionRule{{ApplyServerSideEncryptionByDefault: &s3types.ServerSideEncryptionByDefault{
			SSEAlgorithm: s3types.ServerSideEncryptionAwsKms, KMSMasterKeyID: aws.String(testbed.KMSKey)}}}}})
	must("default encryption of "+sealed, err)
	put(sealed, "runs/metrics.json", `{"accuracy":0.93}`, "")
	put(sealed, "runs/model.bin", "weights", s3types.ServerSideEncryptionAes256)
	put(mixed, "readme.txt", "public notes", "")
	put(mixed, "users.csv", "id,email\n1,a@example.org\n", s3types.ServerSideEncryptionAwsKms)
	encryptedOnBlue := map[string][]string{sealed: {"runs/metrics.json", "runs/model.bin"}, mixed: {"users.csv"}}

	config := filepath.Join(t.TempDir(), "ferry.yaml")
	var cfg strings.Builder
	cfg.WriteString("include: {namespaces: [" + blueNS + "]}\nbuckets:\n")
	for _, b := range []string{sealed, mixed} {
		cfg.WriteString("- name: " + b + "\n  namespace: " + blueNS + "\n  workload: deployment/minio\n  port: 9000\n  secret: {name: artifact-keys, accessKeyKey: accesskey, secretKeyKey: secretkey}\n")
	}
	must("write ferry.yaml", os.WriteFile(config, []byte(cfg.String()), 0o644))
	url := backupMinIO(t, "bucketencryption")
	const backup = "bucket-encryption"
	if code, stdout, errOut := runFerry(t, "--storage", url, "backup", "--from", "blue", "-f", config, "--name", backup); code != 0 {
		t.Fatalf("ferry backup exited %d\nstdout: %.2000s\nstderr: %.2000s", code, stdout, errOut)
	}

	t.Run("green keeps blue's encryption", func(t *testing.T) {
		for _, command := range []string{"restore", "verify"} {
			if code, rep, errOut := runReportCommand(t, "--storage", url, command, "--to", "green", "--backup", backup, "--namespace-map", blueNS+"="+greenNS); code != 0 {
				t.Fatalf("ferry %s exited %d: %s %s %+v\n%.2000s", command, code, rep.Result, rep.Error, rep.Items, errOut)
			}
		}
		blueSide, greenSide := side{name: "blue", minio: blueMinIO}, side{name: "green", minio: greenMinIO}
		if diffs := compareBuckets(t, ctx, blueSide, greenSide, []string{sealed, mixed}); len(diffs) > 0 {
			t.Errorf("green's buckets differ from blue's:\n%s", strings.Join(diffs, "\n"))
		}
		if s := bucketSettings(t, greenMinIO.S3Client(), sealed); !strings.Contains(s["encryption"], testbed.KMSKey) {
			t.Errorf("green's %s has default encryption %q, want SSE-KMS under %s", sealed, s["encryption"], testbed.KMSKey)
		}
	})

	t.Run("a store that cannot encrypt gets nothing blue kept encrypted", func(t *testing.T) {
		plain, err := tb.AddMinIO(ctx, "sealed-plain", true)
		must("start a MinIO without a KMS", err)
		t.Cleanup(func() { tb.RemoveMinIO("sealed-plain") })
		serveMinIOOf(t, "green", plainNS, plain)
		code, rep, errOut := runReportCommand(t, "--storage", url, "restore", "--to", "green", "--backup", backup, "--namespace-map", blueNS+"="+plainNS)
		var failed []string
		for _, it := range rep.Items {
			if it.Status == snapshot.StatusFailed {
				failed = append(failed, it.Name+": "+it.Detail)
			}
		}
		t.Logf("restore onto a store without a KMS exited %d, failed:\n%s", code, strings.Join(failed, "\n"))
		if all := strings.Join(failed, "\n"); code != 3 || !strings.Contains(all, sealed) || !strings.Contains(all, "users.csv: put: the target's store cannot keep it encrypted") {
			t.Errorf("restore onto a store without a KMS exited %d, failed %q; want 3, and %s and users.csv named\n%.2000s", code, failed, sealed, errOut)
		}
		for bucket, keys := range encryptedOnBlue {
			got := bucketContents(t, plain, bucket, "")
			for _, key := range keys {
				if _, ok := got[key]; ok {
					t.Errorf("%s/%s, encrypted on blue, is on the store without a KMS, in clear", bucket, key)
				}
			}
		}
		if got := bucketContents(t, plain, mixed, ""); string(got["readme.txt"]) != "public notes" {
			t.Errorf("%s/readme.txt, in clear on blue, is not on the store without a KMS: %q", mixed, got["readme.txt"])
		}
	})
}

package integration

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"github.com/ferrykube/ferry/storage"
	"github.com/ferrykube/ferry/storage/repo"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/ferrykube/ferry/integration/testbed"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/klauspost/compress/zstd"
	miniocreds "github.com/minio/minio-go/v7/pkg/credentials"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// Where TestCanaryNeverLeaks keeps its data. Names avoid "canary-" followed by hexadecimal digits,
// the shape of the canaries, so that a name is never taken for one.
const (
	canaryNS      = "ferry-canary"     // moves: its Secrets, claim, database and bucket workloads
	canaryOpsNS   = "ferry-canary-ops" // stays on blue: the webhook's API key, read by reference
	canarySchema  = "ferry_canary"
	canaryTable   = canarySchema + ".notes"
	canaryBucket  = "ferry-canary-notes"
	canaryClaim   = "files"
	canaryFolder  = "canary"
	canaryEnvVar  = "FERRY_CANARY_LB_TOKEN"
	canaryDBUser  = "ferry_canary"
	canaryObject  = "notes/secret.txt"
	canaryBackup  = "canary-plain"
	canaryEncBack = "canary-sealed"
)

// TestCanaryNeverLeaks puts unique canary values everywhere ferry meets secrets and user data —
// a Secret's data, a database row, a file of a claim, a bucket object's content and user
// metadata, two webhook headers given by reference (an environment variable, a Secret on blue),
// the storage credentials (short-lived ones from MinIO's STS, with a session token) and the age
// identity — and runs what an operator runs: backup (plain and encrypted), restore, verify with
// differences on the target, schedule create --dry-run, migrate (encrypted, to 100 %), writes on
// green, rollback --carry-back and prune. No canary may appear — as it is, in hexadecimal, in
// base64 of any alignment, URL-escaped, or by a 12-character part — in any byte of storage (each
// object and its user metadata, decompressed too) but the plain backup's own data streams; in any
// line ferry printed; in any pod created on either cluster while it ran (spec, env, annotations;
// storage credentials only inside a presigned URL with an expiry); in the metadata of any object
// of the moved namespace; or in the schedule's manifests, whose credentials are references.
func TestCanaryNeverLeaks(t *testing.T) {
	testbed.Require(t, tb)
	ctx := context.Background()
	blue, blueKC := clients(t, "blue")
	green, greenKC := clients(t, "green")
	_, blueDyn, err := blue.Clients()
	if err != nil {
		t.Fatal(err)
	}
	_, greenDyn, err := green.Clients()
	if err != nil {
		t.Fatal(err)
	}
	blueDB, greenDB := tb.MariaDB["blue"], tb.MariaDB["green"]
	blueS3, greenS3 := tb.MinIO["blue"], tb.MinIO["green"]
	removeCanary(t, blueKC, greenKC) // what an interrupted earlier run may have left
	t.Cleanup(func() { removeCanary(t, blueKC, greenKC) })

	set := &canarySet{}
	value := func(name string) string { // also called by steps: no t here
		b := make([]byte, 8)
		rand.Read(b) // never fails
		v := "canary-" + hex.EncodeToString(b)
		set.add(name, v, v[:12])
		return v
	}
	seed := canarySeed{secret: value("Secret data"), row: value("database row"), file: value("file"), object: value("bucket object"),
		meta: value("object metadata"), apiKey: value("webhook header (Secret)"), dbPassword: value("database password")}
	secretValue, tokenValue, apiKeyValue := seed.secret, value("webhook header (env)"), seed.apiKey
	// The platform MinIO's secret key is the testbed's, shared by every test: not unique, but
	// nothing of this test shows it but the Secret that holds it.
	set.add("bucket secret key", blueS3.SecretKey, "stbed-secret")
	targetSecret, targetRow, targetFile, targetObject := value("Secret data changed on the target"), value("row changed on the target"), value("file changed on the target"), value("object changed on the target")
	greenSecret, greenRow, greenFile, greenObject := value("Secret data written on green"), value("row written on green"), value("file written on green"), value("object written on green")

	// The storage credentials: short-lived ones of the backup MinIO's STS, so that each is unique
	// to this run. ferry gets them as a user would give them, in the AWS environment variables.
	url := backupMinIO(t, canaryFolder)
	backupS3 := tb.MinIO["backup"]
	sts, err := miniocreds.NewSTSAssumeRole(backupS3.Endpoint, miniocreds.STSAssumeRoleOptions{AccessKey: backupS3.AccessKey, SecretKey: backupS3.SecretKey, DurationSeconds: 3600})
	if err != nil {
		t.Fatal(err)
	}
	creds, err := sts.Get()
	if err != nil {
		t.Fatalf("short-lived credentials from the backup MinIO's STS: %v", err)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", creds.AccessKeyID)
	t.Setenv("AWS_SECRET_ACCESS_KEY", creds.SecretAccessKey)
	t.Setenv("AWS_SESSION_TOKEN", creds.SessionToken)
	set.add("storage access key", creds.AccessKeyID, creds.AccessKeyID[:12])
	set.add("storage secret key", creds.SecretAccessKey, creds.SecretAccessKey[:12])
	set.add("storage session token", creds.SessionToken, creds.SessionToken[len(creds.SessionToken)-12:])
	t.Setenv(canaryEnvVar, "Bearer "+tokenValue)

	// The age identity of the encrypted backups and run.
	id, identity := newIdentity(t)
	const agePrefix = "AGE-SECRET-KEY-1"
	set.add("age identity", id.String(), id.String()[len(agePrefix):len(agePrefix)+12])
	set.add("age identity (lower case)", strings.ToLower(id.String()), strings.ToLower(id.String()[len(agePrefix):len(agePrefix)+12]))
	recipient := id.Recipient().String()

	c := &canaryCheck{set: set, url: url, tallies: map[string]*scanTally{}}
	watchCtx, stopWatching := context.WithCancel(ctx)
	defer stopWatching()
	c.watchPods(t, watchCtx, "blue", blueKC)
	c.watchPods(t, watchCtx, "green", greenKC)
	hook := startSplitReceiver(t, tokenValue, apiKeyValue)
	config := filepath.Join(t.TempDir(), "ferry.yaml")
	if err := os.WriteFile(config, []byte(canaryConfig(hook.URL)), 0o644); err != nil {
		t.Fatal(err)
	}

	if !t.Run("seed", func(t *testing.T) {
		seedCanary(t, blue, blueKC, green, seed)
	}) {
		t.FailNow()
	}

	// 1. Backups of blue, plain and encrypted, and what describes them.
	var exempt map[string]bool // the plain backup's data streams
	if !t.Run("backup", func(t *testing.T) {
		for _, b := range []struct {
			name  string
			extra []string
		}{{canaryBackup, nil}, {canaryEncBack, []string{"--encrypt-to", recipient}}} {
			args := append([]string{"--storage", url, "backup", "--from", "blue", "-f", config, "--name", b.name}, b.extra...)
			if code, out, errOut := c.ferry(t, args...); code != 0 {
				t.Fatalf("ferry backup %s exited %d, want 0\nstdout: %s\nstderr: %s", b.name, code, out, errOut)
			}
			c.ferry(t, "--storage", url, "backups", "describe", b.name)
			c.ferry(t, "--storage", url, "backups", "describe", b.name, "-o", "json")
		}
		c.ferry(t, "--storage", url, "backups", "list")
		exempt = c.plainDataStreams(t, canaryBackup)
		_, m := readManifest(t, url, canaryBackup)
		if len(m.Volumes) != 1 || len(m.Databases) != 1 || len(m.Buckets) != 1 {
			t.Fatalf("the plain backup holds %d volumes, %d databases and %d buckets, want one of each: the canaries would not be where they should",
				len(m.Volumes), len(m.Databases), len(m.Buckets))
		}
		// Without the identity, an encrypted backup is refused: that error is output too.
		if code, _, _ := c.ferry(t, "--storage", url, "verify", "--to", "green", "--backup", canaryEncBack); code == 0 {
			t.Error("verify of the encrypted backup without --identity exited 0")
		}
	}) {
		t.FailNow()
	}

	// 2. The encrypted backup restored onto green; then green's copies of the Secret, the row, the
	// file and the object changed, so that verify reports each as different, by name only.
	if !t.Run("restore-and-verify", func(t *testing.T) {
		code, out, errOut := c.ferry(t, "--storage", url, "restore", "--to", "green", "--backup", canaryEncBack, "--identity", identity, "-o", "json")
		if code != 0 {
			t.Fatalf("ferry restore exited %d, want 0\nstdout: %s\nstderr: %s", code, out, errOut)
		}
		secrets := greenKC.CoreV1().Secrets(canaryNS)
		s, err := secrets.Get(ctx, "creds", metav1.GetOptions{})
		if err != nil || string(s.Data["token"]) != secretValue {
			t.Fatalf("the restore did not bring Secret creds to green as blue has it (%v)", err)
		}
		s.Data["token"] = []byte(targetSecret)
		if _, err := secrets.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := greenDB.SQL(ctx, tb.Bins, "UPDATE "+canaryTable+" SET note = '"+targetRow+"' WHERE id = 1"); err != nil {
			t.Fatal(err)
		}
		writeClaimFiles(t, claimFolder(t, greenKC, canaryNS, canaryClaim), map[string][]byte{"notes.txt": []byte(targetFile + "\n")})
		putBucketObject(t, greenS3, canaryObject, []byte(targetObject), nil)

		want := map[string]string{ // kind → a part of the item's name
			"objects": "v1 Secret " + canaryNS + "/creds", "volumes": "notes.txt", "databases": "notes", "buckets": canaryObject,
		}
		for _, b := range []struct {
			name  string
			extra []string
		}{{canaryEncBack, []string{"--identity", identity}}, {canaryBackup, nil}} {
			args := append([]string{"--storage", url, "verify", "--to", "green", "--backup", b.name}, b.extra...)
			code, out, errOut := c.ferry(t, append(args, "-o", "json")...)
			var rep restoreReport
			if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 3 {
				t.Errorf("verify %s -o json exited %d (%v), want 3 and a report\nstdout: %s\nstderr: %s", b.name, code, err, out, errOut)
			}
			for kind, name := range want {
				if !slices.ContainsFunc(rep.Items, func(it snapshot.ReportItem) bool {
					return it.Status == snapshot.StatusDifferent && strings.Contains(it.Name, name)
				}) {
					t.Errorf("verify %s does not report the %s item %q changed on the target as different: %+v", b.name, kind, name, rep.Items)
				}
			}
			if code, out, errOut := c.ferry(t, args...); code != 3 || !strings.Contains(out, "data.token: differs") {
				t.Errorf("verify %s exited %d, want 3 and data.token named\nstdout: %s\nstderr: %s", b.name, code, out, errOut)
			}
		}
		c.scanNamespace(t, "green", greenKC, greenDyn)
	}) {
		t.FailNow()
	}

	// 3. An operator's mistakes with secrets are refused without showing them: an identity given
	// as a recipient, credentials in the storage URL or its endpoint, secret settings of ferry.yaml
	// in place or in URLs, a scalar where a header map belongs, storage credentials that are wrong.
	t.Run("bad-input", func(t *testing.T) {
		short := make([]byte, 5)
		rand.Read(short)
		shortValue := hex.EncodeToString(short) // as short as a password may be
		set.add("short secret in ferry.yaml", shortValue, shortValue)
		refused := func(what string, args ...string) {
			t.Helper()
			if code, _, errOut := c.ferry(t, args...); code != 2 {
				t.Errorf("%s: exit %d, want 2 (bad input)\nstderr: %s", what, code, lastLines(errOut, 5))
			}
		}
		idArg := id.String()
		refused("an identity given to backup --encrypt-to", "--storage", url, "backup", "--from", "blue", "-f", config, "--name", "canary-mistake", "--encrypt-to", idArg)
		refused("an identity given to migrate --encrypt-to", "--storage", url, "migrate", "--from", "blue", "--to", "green", "-f", config, "--encrypt-to", idArg)
		refused("an identity given to schedule create --encrypt-to", "--storage", url, "schedule", "create", "canary-mistake", "--cron", "@daily", "--from", "blue",
			"--storage-secret", "ferry-storage", "--encrypt-to", idArg, "--dry-run", "-o", "yaml")
		withCreds := strings.Replace(url, "s3://", "s3://"+creds.AccessKeyID+":"+creds.SecretAccessKey+"@", 1)
		refused("credentials in the storage URL", "--storage", withCreds, "backups", "list")
		endpointCreds := strings.Replace(url, "endpoint=http://", "endpoint=http://"+creds.AccessKeyID+":"+creds.SecretAccessKey+"@", 1)
		refused("credentials in the storage URL's endpoint", "--storage", endpointCreds, "backups", "list")
		for what, doc := range map[string]string{
			"a header's value in place":       "traffic: {type: webhook, webhook: {url: \"" + hook.URL + "\", headers: {Authorization: \"Bearer " + tokenValue + "\"}}}\n",
			"a password in the webhook's URL": "traffic: {type: webhook, webhook: {url: \"http://lb:" + tokenValue + "@127.0.0.1:1/split\"}}\n",
			"a password in a gate's URL":      "rollout: {gates: [{name: front, type: http, http: {url: \"http://probe:" + tokenValue + "@127.0.0.1:1/\"}}]}\n",
			"a scalar for the header map":     "traffic: {type: webhook, webhook: {url: \"" + hook.URL + "\", headers: " + shortValue + "}}\n",
		} {
			file := filepath.Join(t.TempDir(), "ferry.yaml")
			if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
				t.Fatal(err)
			}
			refused(what, "plan", "--from", "blue", "-f", file)
		}
		// Storage credentials that are wrong (and look like canaries): the refusal names neither.
		wrongKey, wrongSecret := value("wrong storage access key"), value("wrong storage secret key")
		t.Setenv("AWS_ACCESS_KEY_ID", wrongKey)
		t.Setenv("AWS_SECRET_ACCESS_KEY", wrongSecret)
		t.Setenv("AWS_SESSION_TOKEN", "")
		if code, _, _ := c.ferry(t, "--storage", url, "backups", "list"); code == 0 {
			t.Error("backups list with wrong storage credentials exited 0")
		}
	})

	// 4. The schedule's manifests: credentials by reference only.
	t.Run("schedule-dry-run", func(t *testing.T) {
		code, out, errOut := c.ferry(t, "--storage", url, "schedule", "create", "canary-nightly", "--cron", "@daily", "--from", "blue",
			"--storage-secret", "ferry-storage", "-f", config, "--encrypt-to", recipient, "--dry-run", "-o", "yaml")
		if code != 0 {
			t.Fatalf("schedule create --dry-run exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
		}
		c.checkScheduleManifests(t, out)
	})

	// 5. The migration, encrypted, to 100 % through the webhook; green then takes writes.
	var runID string
	rolledBack := false
	t.Cleanup(func() {
		if runID != "" && !rolledBack { // blue's writers and traffic back, whatever happened
			if code, _, errOut := runFerry(t, "--storage", url, "rollback", "--run", runID, "--identity", identity, "--discard-green-writes"); code != 0 {
				t.Logf("clean up: ferry rollback --discard-green-writes exited %d: %s", code, lastLines(set.redact(errOut), 5))
			}
		}
	})
	if !t.Run("migrate", func(t *testing.T) {
		// Green as a target that never held the namespace: what the restore made there goes.
		removeNamespace(t, canaryNS, greenKC)
		dropCanaryData(t, "green")
		code, out, errOut := c.ferry(t, "--storage", url, "migrate", "--from", "blue", "--to", "green", "-f", config,
			"--encrypt-to", recipient, "--identity", identity, "--lease-ttl", testLeaseTTL.String())
		if m := runIDPattern.FindStringSubmatch(errOut); m != nil {
			runID = m[1]
		}
		if code != 0 || !strings.Contains(out, "shifted") {
			t.Fatalf("ferry migrate exited %d, want 0 and shifted\nstdout: %s\nstderr: %s", code, out, lastLines(errOut, 40))
		}
		if got := hook.last(); got != `{"blue":0,"green":100}` {
			t.Errorf("the webhook's last split: %q, want all on green", got)
		}
		c.ferry(t, "--storage", url, "migrate", "status", runID)
		c.ferry(t, "--storage", url, "migrate", "status", runID, "-o", "json")
		c.scanNamespace(t, "green", greenKC, greenDyn)
		c.scanNamespace(t, "blue", blueKC, blueDyn) // quiesced: ferry's annotations on its writer
	}) {
		t.FailNow()
	}

	if !t.Run("carry-back", func(t *testing.T) {
		s, err := greenKC.CoreV1().Secrets(canaryNS).Get(ctx, "creds", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.Data["token"] = []byte(greenSecret)
		if _, err := greenKC.CoreV1().Secrets(canaryNS).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := greenDB.SQL(ctx, tb.Bins, "INSERT INTO "+canaryTable+" VALUES (2, '"+greenRow+"')"); err != nil {
			t.Fatal(err)
		}
		writeClaimFiles(t, claimFolder(t, greenKC, canaryNS, canaryClaim), map[string][]byte{"green.txt": []byte(greenFile + "\n")})
		putBucketObject(t, greenS3, "notes/green.txt", []byte(greenObject), nil)

		// A plain rollback refuses, naming what green holds that blue lacks (names, never values).
		if code, _, errOut := c.ferry(t, "--storage", url, "rollback", "--run", runID, "--identity", identity); code != 4 || !strings.Contains(errOut, "v1 Secret "+canaryNS+"/creds") {
			t.Errorf("a plain rollback after green's writes exited %d, want 4 (a refusal to lose data) naming the Secret\nstderr: %s", code, lastLines(errOut, 5))
		}
		code, out, errOut := c.ferry(t, "--storage", url, "--log-format", "json", "rollback", "--run", runID, "--carry-back", "--identity", identity, "--lease-ttl", testLeaseTTL.String())
		if code != 0 {
			t.Fatalf("ferry rollback --carry-back exited %d, want 0\nstdout: %s\nstderr: %s", code, out, lastLines(errOut, 40))
		}
		rolledBack = true
		if got := hook.last(); got != `{"blue":100,"green":0}` {
			t.Errorf("the webhook's last split: %q, want all on blue", got)
		}
		// Green's writes are blue's now.
		if s, err := blueKC.CoreV1().Secrets(canaryNS).Get(ctx, "creds", metav1.GetOptions{}); err != nil || string(s.Data["token"]) != greenSecret {
			t.Errorf("Secret creds on blue after the carry-back does not hold green's value (%v)", err)
		}
		if rows, err := blueDB.SQL(ctx, tb.Bins, "SELECT COUNT(*) FROM "+canaryTable+" WHERE id = 2 AND note = '"+greenRow+"'"); err != nil || strings.TrimSpace(rows) != "1" {
			t.Errorf("green's row is not on blue after the carry-back (%v)", err)
		}
		if got, err := os.ReadFile(filepath.Join(claimFolder(t, blueKC, canaryNS, canaryClaim), "green.txt")); err != nil || string(got) != greenFile+"\n" {
			t.Errorf("green's file is not on blue after the carry-back (%v)", err)
		}
		if got := bucketContents(t, blueS3, canaryBucket, "notes/green.txt"); string(got["notes/green.txt"]) != greenObject {
			t.Error("green's object is not on blue after the carry-back")
		}
		c.ferry(t, "--storage", url, "migrate", "status", runID)
		c.ferry(t, "--storage", url, "migrate", "status", runID, "-o", "json")
		c.ferry(t, "--storage", url, "migrate", "list")
		c.ferry(t, "--storage", url, "backups", "describe", runID+"-carry-back")
		c.scanNamespace(t, "blue", blueKC, blueDyn)
	}) {
		t.FailNow()
	}

	// 6. Storage, whole, before prune removes anything: every byte but the plain backup's own
	// data streams; then prune, and storage again.
	t.Run("storage", func(t *testing.T) {
		fileIn := canaryClaim + ".tar.zst"
		if slices.ContainsFunc(slices.Collect(maps.Keys(exempt)), func(k string) bool { return strings.HasPrefix(k, repo.DefaultPrefix) }) {
			fileIn = repo.DefaultPrefix + "packs/" // chunks, the default
		}
		c.checkSearchFinds(t, exempt, map[string]string{
			"Secret data": canaryBackup + ".tar.gz", "database row": "notes-db", "file": fileIn, "bucket object": "secret.txt",
		})
		c.scanStorage(t, "before prune", exempt)
	})
	t.Run("prune", func(t *testing.T) {
		if code, out, errOut := c.ferry(t, "--storage", url, "prune", "--keep-last", "1", "--dry-run"); code != 0 {
			t.Errorf("prune --dry-run exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
		}
		if code, out, errOut := c.ferry(t, "--storage", url, "prune", "--keep-last", "1", "-o", "json"); code != 0 {
			t.Errorf("prune exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
		}
		c.scanStorage(t, "after prune", exempt)
	})

	// Direct movers: they upload through part URLs ferry presigns on demand (what they are handed
	// on stdin is checked by the unit tests of snapshot/volumes), so the pod watch and the storage
	// scan hold them to the same rules as the others.
	t.Run("mover-direct", func(t *testing.T) {
		name := "canary-direct"
		if code, out, errOut := c.ferry(t, "--storage", url, "backup", "--from", "blue", "-f", config, "--name", name,
			"--encrypt-to", recipient, "--mover-direct"); code != 0 {
			t.Fatalf("ferry backup --mover-direct exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
		}
		if code, out, errOut := c.ferry(t, "--storage", url, "verify", "--to", "blue", "--backup", name, "--identity", identity, "--mover-direct"); code != 0 {
			t.Errorf("ferry verify --mover-direct exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
		}
		c.scanStorage(t, "after the direct backup", exempt)
	})

	// 7. The pods ferry made (and any other) while it ran, and the tally.
	t.Run("pods", func(t *testing.T) {
		stopWatching()
		c.wg.Wait()
		c.checkPods(t)
	})
	var summary []string
	for _, kind := range slices.Sorted(maps.Keys(c.tallies)) {
		summary = append(summary, fmt.Sprintf("%s: %d scanned, %d bytes", kind, c.tallies[kind].items, c.tallies[kind].bytes))
	}
	t.Logf("%d canaries in %d forms searched; %s; %d plain data streams exempt; %d pods seen (%d movers); %d webhook requests",
		len(set.names), len(set.probes), strings.Join(summary, "; "), c.exempted, len(c.pods), c.movers(), hook.count())
}

// canaryConfig is the ferry.yaml of the test: the namespace with its database and bucket, the
// webhook switcher with its headers by reference, two steps gated by green's readiness.
func canaryConfig(hookURL string) string {
	return `include:
  namespaces: [` + canaryNS + `]
  resources: [namespaces, secrets, configmaps, persistentvolumeclaims, deployments.apps, services]
databases:
- name: notes-db
  engine: mysql
  namespace: ` + canaryNS + `
  workload: deployment/notes-db
  secret: {name: db-creds, userKey: username, passwordKey: password}
  schemas: [` + canarySchema + `]
buckets:
- name: ` + canaryBucket + `
  namespace: ` + canaryNS + `
  workload: deployment/notes-store
  port: 9000
  secret: {name: store-creds, accessKeyKey: accesskey, secretKeyKey: secretkey}
quiesce:
- resource: deployments.apps
  namespace: ` + canaryNS + `
  names: [notes-writer]
  action: scale-to-zero
  why: it writes the notes
traffic:
  type: webhook
  webhook:
    url: ` + hookURL + `/split
    headers:
      Authorization: {valueFrom: {env: ` + canaryEnvVar + `}}
      X-Api-Key: {valueFrom: {secretKeyRef: {namespace: ` + canaryOpsNS + `, name: lb-credentials, key: api-key}}}
rollout:
  steps: [50, 100]
  soak: 1s
  interval: 500ms
  gates:
  - name: green-ready
    type: kubernetes
    kubernetes: {context: green, namespaces: [` + canaryNS + `]}
`
}

// canarySeed are the canaries blue holds before the first backup.
type canarySeed struct{ secret, row, file, object, meta, apiKey, dbPassword string }

// seedCanary puts blue's data in place, with its canaries: the Secret, the claim's file, the row,
// the object and its metadata, the webhook's API key, and the password of the database's own user
// (on blue's and green's servers, as a platform's Secret moves with it); and serves the database
// and MinIO pods of the namespace on blue and on green with the testbed's servers of each.
func seedCanary(t *testing.T, blue *testbed.Cluster, blueKC kubernetes.Interface, green *testbed.Cluster, seed canarySeed) {
	ctx := context.Background()
	db, store := tb.MariaDB["blue"], tb.MinIO["blue"]
	for _, c := range []*testbed.Cluster{blue, green} {
		if err := tb.ServeExec(c, canaryNS, "app=notes-db", tb.MariaDB[c.Name].ClientHome, tb.MariaDB[c.Name].Env()); err != nil {
			t.Fatal(err)
		}
		if err := tb.ServePortForward(c, canaryNS, "app=notes-store", 9000, "127.0.0.1", tb.MinIO[c.Name].Port); err != nil {
			t.Fatal(err)
		}
		var users strings.Builder
		for _, host := range []string{"%", "localhost", "127.0.0.1"} {
			fmt.Fprintf(&users, "CREATE OR REPLACE USER '%s'@'%s' IDENTIFIED BY '%s'; GRANT ALL PRIVILEGES ON *.* TO '%s'@'%s';\n", canaryDBUser, host, seed.dbPassword, canaryDBUser, host)
		}
		if _, err := tb.MariaDB[c.Name].SQL(ctx, tb.Bins, users.String()); err != nil {
			t.Fatal(err)
		}
	}
	if err := green.ApplyStandardStorageClass(ctx); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{canaryNS, canaryOpsNS} {
		if _, err := blueKC.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: canaryNS}, Data: map[string][]byte{"token": []byte(seed.secret)}},
		{ObjectMeta: metav1.ObjectMeta{Name: "db-creds", Namespace: canaryNS}, StringData: map[string]string{"username": canaryDBUser, "password": seed.dbPassword}},
		{ObjectMeta: metav1.ObjectMeta{Name: "store-creds", Namespace: canaryNS}, StringData: map[string]string{"accesskey": store.AccessKey, "secretkey": store.SecretKey}},
		{ObjectMeta: metav1.ObjectMeta{Name: "lb-credentials", Namespace: canaryOpsNS}, Data: map[string][]byte{"api-key": []byte(seed.apiKey)}},
	} {
		if _, err := blueKC.CoreV1().Secrets(s.Namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"notes-db", "notes-store", "notes-writer"} {
		serveDeployment(t, blueKC, canaryNS, name)
	}
	// The claim's class is green's "standard", so that green provisions its copy as it is.
	createClaim(t, blueKC, canaryNS, canaryClaim, ptr.To("standard"))
	claimDir := dataDir(t, canaryNS+"-"+canaryClaim)
	writeClaimFiles(t, claimDir, map[string][]byte{"notes.txt": []byte(seed.file + "\n"), "plain.txt": []byte("nothing to hide\n")})
	if err := blue.BindClaim(ctx, canaryNS, canaryClaim, claimDir); err != nil {
		t.Fatal(err)
	}
	if _, err := db.SQL(ctx, tb.Bins, `DROP DATABASE IF EXISTS `+canarySchema+`; CREATE DATABASE `+canarySchema+`;
CREATE TABLE `+canaryTable+` (id INT PRIMARY KEY, note VARCHAR(64));
INSERT INTO `+canaryTable+` VALUES (1, '`+seed.row+`');`); err != nil {
		t.Fatal(err)
	}
	if err := store.CreateBucket(ctx, canaryBucket); err != nil {
		t.Fatal(err)
	}
	putBucketObject(t, store, canaryObject, []byte(seed.object), map[string]string{"note": seed.meta})
	putBucketObject(t, store, "notes/plain.txt", []byte("nothing to hide"), nil)
}

// putBucketObject writes an object into canaryBucket of a testbed MinIO, with user metadata.
func putBucketObject(t *testing.T, m *testbed.MinIO, key string, data []byte, meta map[string]string) {
	t.Helper()
	if _, err := m.S3Client().PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String(canaryBucket), Key: aws.String(key),
		Body: bytes.NewReader(data), Metadata: meta}); err != nil {
		t.Fatalf("put %s into %s's MinIO: %v", key, m.Name, err)
	}
}

// dropCanaryData removes the test's schema and bucket from the testbed servers of one cluster.
func dropCanaryData(t *testing.T, cluster string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := tb.MariaDB[cluster].SQL(ctx, tb.Bins, "DROP DATABASE IF EXISTS "+canarySchema); err != nil {
		t.Logf("clean up %s's MariaDB: %v", cluster, err)
	}
	s3c := tb.MinIO[cluster].S3Client()
	p := s3.NewListObjectsV2Paginator(s3c, &s3.ListObjectsV2Input{Bucket: aws.String(canaryBucket)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return // no bucket
		}
		for _, o := range page.Contents {
			if _, err := s3c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(canaryBucket), Key: o.Key}); err != nil {
				t.Logf("clean up %s's MinIO: %v", cluster, err)
			}
		}
	}
	if _, err := s3c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(canaryBucket)}); err != nil {
		t.Logf("clean up %s's MinIO: %v", cluster, err)
	}
}

// removeCanary removes, best effort, what TestCanaryNeverLeaks made on blue and green.
func removeCanary(t *testing.T, blueKC, greenKC kubernetes.Interface) {
	for _, cluster := range []string{"blue", "green"} {
		dropCanaryData(t, cluster)
		for _, host := range []string{"%", "localhost", "127.0.0.1"} {
			if _, err := tb.MariaDB[cluster].SQL(context.Background(), tb.Bins, "DROP USER IF EXISTS '"+canaryDBUser+"'@'"+host+"'"); err != nil {
				t.Logf("clean up %s's MariaDB: %v", cluster, err)
			}
		}
	}
	removeNamespace(t, canaryNS, blueKC, greenKC)
	removeNamespace(t, canaryOpsNS, blueKC)
}

// splitReceiver is the webhook a load balancer would offer: it takes a split only with both
// headers right.
type splitReceiver struct {
	URL     string
	mu      sync.Mutex
	splits  []string
	refused int
}

func startSplitReceiver(t *testing.T, token, apiKey string) *splitReceiver {
	r := &splitReceiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		ok := req.Method == http.MethodPost && req.Header.Get("Authorization") == "Bearer "+token && req.Header.Get("X-Api-Key") == apiKey
		r.mu.Lock()
		defer r.mu.Unlock()
		if !ok {
			r.refused++
			http.Error(w, "not authorized", http.StatusUnauthorized)
			return
		}
		r.splits = append(r.splits, strings.TrimSpace(string(body)))
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

func (r *splitReceiver) last() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.refused > 0 {
		return fmt.Sprintf("%d requests refused for wrong headers", r.refused)
	}
	if len(r.splits) == 0 {
		return ""
	}
	return r.splits[len(r.splits)-1]
}

func (r *splitReceiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.splits) + r.refused
}

// canarySet holds the canaries and every form each is searched in.
type canarySet struct {
	names  []string
	probes []canaryProbe
}

type canaryProbe struct {
	canary, form string
	bytes        []byte
}

// add adds a canary: the value as it is, in hexadecimal (both cases), in standard and URL base64
// at each of the three alignments it can have inside a longer encoded text, URL-escaped when
// that differs, and part, a distinctive 12-character piece (a prefix where the value has no
// generic start) that catches a value shortened for display.
func (s *canarySet) add(name, value, part string) {
	s.names = append(s.names, name)
	forms := [][2]string{
		{"as is", value},
		{"hex", hex.EncodeToString([]byte(value))},
		{"HEX", strings.ToUpper(hex.EncodeToString([]byte(value)))},
		{"12-character part", part},
		{"URL-escaped", url.QueryEscape(value)},
		{"URL-escaped (path)", url.PathEscape(value)},
	}
	for pad := range 3 {
		for _, e := range []struct {
			name string
			enc  *base64.Encoding
		}{{"base64", base64.StdEncoding}, {"base64url", base64.URLEncoding}} {
			text := e.enc.EncodeToString(append(make([]byte, pad), value...))
			// The padding's characters and the last, partial group depend on the bytes around.
			start, end := []int{0, 2, 3}[pad], 4*((pad+len(value))/3)
			forms = append(forms, [2]string{fmt.Sprintf("%s at offset %d", e.name, pad), text[start:end]})
		}
	}
	seen := map[string]bool{}
	for _, f := range forms {
		form, v := f[0], f[1]
		if len(v) < min(12, len(value)) || seen[v] {
			continue
		}
		seen[v] = true
		s.probes = append(s.probes, canaryProbe{canary: name, form: form, bytes: []byte(v)})
	}
}

// find names each canary found in data, by its form and offset, never the bytes around it.
func (s *canarySet) find(data []byte) []string {
	var found []string
	for _, p := range s.probes {
		if i := bytes.Index(data, p.bytes); i >= 0 {
			found = append(found, fmt.Sprintf("canary %q (%s) at byte %d", p.canary, p.form, i))
		}
	}
	return found
}

// redact replaces every form of every canary, so that a failing test's messages never show one.
func (s *canarySet) redact(text string) string {
	for _, p := range s.probes {
		text = strings.ReplaceAll(text, string(p.bytes), "<canary "+p.canary+">")
	}
	return text
}

// canaryCheck scans what ferry left and keeps the tally.
type canaryCheck struct {
	set      *canarySet
	url      string
	mu       sync.Mutex
	tallies  map[string]*scanTally // by kind of place
	exempted int
	wg       sync.WaitGroup
	pods     map[string][]byte // cluster/ns/name → each version seen, as JSON lines
	isMover  map[string]bool
}

type scanTally struct {
	items int
	bytes int64
}

// check searches data for the canaries and fails the test for each one found, naming the place.
func (c *canaryCheck) check(t *testing.T, kind, place string, data []byte) {
	t.Helper()
	c.mu.Lock()
	tally := c.tallies[kind]
	if tally == nil {
		tally = &scanTally{}
		c.tallies[kind] = tally
	}
	tally.items++
	tally.bytes += int64(len(data))
	c.mu.Unlock()
	for _, f := range c.set.find(data) {
		t.Errorf("LEAK in %s: %s", place, f)
	}
}

// ferry runs ferry, checks everything it printed, and returns its output with the canaries
// redacted (for the test's own messages).
func (c *canaryCheck) ferry(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	code, out, errOut := runFerry(t, args...)
	what := "the output of ferry " + c.set.redact(strings.ReplaceAll(strings.Join(args, " "), c.url, "$STORAGE"))
	c.check(t, "ferry output lines", what+" (stdout)", []byte(out))
	c.check(t, "ferry output lines", what+" (stderr)", []byte(errOut))
	return code, c.set.redact(out), c.set.redact(errOut)
}

// watchPods records every version of every pod of cluster until ctx ends.
func (c *canaryCheck) watchPods(t *testing.T, ctx context.Context, cluster string, kc kubernetes.Interface) {
	pods := kc.CoreV1().Pods("")
	list, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return pods.Watch(ctx, o) },
	})
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	if c.pods == nil {
		c.pods, c.isMover = map[string][]byte{}, map[string]bool{}
	}
	c.mu.Unlock()
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					return
				}
				pod, ok := ev.Object.(*corev1.Pod)
				if !ok {
					continue
				}
				var buf bytes.Buffer
				enc := json.NewEncoder(&buf)
				enc.SetEscapeHTML(false) // presigned URLs keep their & as they are
				enc.Encode(pod)
				key := cluster + "/" + pod.Namespace + "/" + pod.Name
				c.mu.Lock()
				c.pods[key] = append(c.pods[key], buf.Bytes()...)
				if pod.Labels["app.kubernetes.io/name"] == "ferry-mover" {
					c.isMover[key] = true
				}
				c.mu.Unlock()
			}
		}
	}()
}

func (c *canaryCheck) movers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.isMover)
}

// presigned is a presigned S3 URL with an expiry: the one form storage credentials may take in a
// pod. Its access key (in X-Amz-Credential) and session token are allowed there.
var presigned = regexp.MustCompile(`https?://[^"\s]*[?&]X-Amz-Algorithm=[^"\s]*`)

func (c *canaryCheck) checkPods(t *testing.T) {
	c.mu.Lock()
	pods, movers := maps.Clone(c.pods), maps.Clone(c.isMover)
	c.mu.Unlock()
	for _, key := range slices.Sorted(maps.Keys(pods)) {
		data := presigned.ReplaceAllFunc(pods[key], func(u []byte) []byte {
			q, err := url.ParseQuery(string(u[bytes.IndexByte(u, '?')+1:]))
			expires, _ := strconv.Atoi(q.Get("X-Amz-Expires"))
			if err != nil || q.Get("X-Amz-Signature") == "" || expires <= 0 || expires > 7*24*3600 {
				return u // not presigned with an expiry: checked as it is
			}
			return []byte("<presigned URL>")
		})
		kind := "pod"
		if movers[key] {
			kind = "mover pod"
		}
		c.check(t, kind+" versions", kind+" "+key+" (spec, env, annotations, status)", data)
	}
	if len(movers) == 0 {
		t.Error("no mover pod was seen: the watch missed them, so their check proves nothing")
	}
}

// scanNamespace checks every object of the moved namespace on a cluster: all of it but a Secret's
// data, which holds the canary by design.
func (c *canaryCheck) scanNamespace(t *testing.T, cluster string, kc kubernetes.Interface, dyn dynamic.Interface) {
	t.Helper()
	ctx := context.Background()
	lists, err := kc.Discovery().ServerPreferredNamespacedResources()
	if err != nil && len(lists) == 0 {
		t.Fatal(err)
	}
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range l.APIResources {
			if !slices.Contains(r.Verbs, "list") || strings.Contains(r.Name, "/") {
				continue
			}
			objs, err := dyn.Resource(gv.WithResource(r.Name)).Namespace(canaryNS).List(ctx, metav1.ListOptions{})
			if err != nil {
				continue
			}
			for _, o := range objs.Items {
				if r.Kind == "Secret" && gv.Group == "" {
					delete(o.Object, "data")
					delete(o.Object, "stringData")
				}
				data, _ := json.Marshal(o.Object)
				c.check(t, "objects of the moved namespace", fmt.Sprintf("%s %s %s/%s on %s", l.GroupVersion, r.Kind, canaryNS, o.GetName(), cluster), data)
			}
		}
	}
}

// checkScheduleManifests checks the schedule's manifests: no canary, and every credential of the
// CronJob's containers a reference to a Secret.
func (c *canaryCheck) checkScheduleManifests(t *testing.T, out string) {
	t.Helper()
	c.check(t, "schedule manifests", "schedule create --dry-run -o yaml", []byte(out))
	credential := regexp.MustCompile(`(?i)key|secret|token|password|credential`)
	jobs := 0
	for _, doc := range strings.Split(out, "\n---\n") {
		var head metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil || head.Kind != "CronJob" {
			continue
		}
		var cj batchv1.CronJob
		if err := yaml.Unmarshal([]byte(doc), &cj); err != nil {
			t.Fatal(err)
		}
		jobs++
		spec := cj.Spec.JobTemplate.Spec.Template.Spec
		for _, ct := range slices.Concat(spec.InitContainers, spec.Containers) {
			for _, e := range ct.Env {
				if credential.MatchString(e.Name) && e.Value != "" {
					t.Errorf("LEAK in the schedule's CronJob: container %s has %s in place, want a reference to a Secret", ct.Name, e.Name)
				}
			}
			if len(ct.EnvFrom) > 0 {
				for _, ef := range ct.EnvFrom {
					if ef.ConfigMapRef != nil {
						t.Errorf("the schedule's container %s takes its environment from ConfigMap %s, which is not for credentials", ct.Name, ef.ConfigMapRef.Name)
					}
				}
			}
		}
	}
	if jobs != 1 {
		t.Errorf("schedule create --dry-run printed %d CronJobs, want 1", jobs)
	}
}

// plainDataStreams are the files the plain backup's manifest lists as its data: the objects
// archive, each volume's, database's and bucket object's stream, and each bucket's objects'
// metadata. Only they may hold canaries.
func (c *canaryCheck) plainDataStreams(t *testing.T, backup string) map[string]bool {
	t.Helper()
	_, m := readManifest(t, c.url, backup)
	data := map[string]bool{backup + ".tar.gz": true}
	for _, v := range m.Volumes {
		data[v.Key] = true
	}
	for _, d := range m.Databases {
		data[d.Key] = true
	}
	for _, b := range m.Buckets {
		data[b.Metadata] = b.Metadata != "" // the objects' metadata, user metadata included
	}
	exempt := map[string]bool{}
	// A chunked volume's data is in the packs of its (unencrypted) chunk repository.
	for _, v := range m.Volumes {
		if v.Format != snapshot.FormatChunks {
			continue
		}
		store, err := storage.Open(context.Background(), c.url)
		if err != nil {
			t.Fatal(err)
		}
		if err := store.List(context.Background(), v.Repo+"packs/", func(o storage.ObjectInfo) error {
			exempt[o.Key] = true
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range m.Streams {
		inBucket := slices.ContainsFunc(m.Buckets, func(b snapshot.Bucket) bool { return strings.HasPrefix(s.Key, b.Prefix) })
		if data[s.Key] || inBucket {
			exempt[snapshot.Prefix(backup)+s.Key] = true
		}
	}
	if len(exempt) < 4 {
		t.Fatalf("the plain backup's manifest lists %d data streams, want at least the objects, a volume, a database and a bucket object", len(exempt))
	}
	return exempt
}

// scanStorage reads every object under the test's folder of the backup MinIO — its key, its user
// metadata and its bytes, decompressed too when gzip or zstd — and checks them, but for the
// exempt keys. Every file of an encrypted backup but its claim, heartbeat and manifest must be
// age-encrypted.
func (c *canaryCheck) scanStorage(t *testing.T, when string, exempt map[string]bool) {
	t.Helper()
	ctx := context.Background()
	s3c := tb.MinIO["backup"].S3Client()
	p := s3.NewListObjectsV2Paginator(s3c, &s3.ListObjectsV2Input{Bucket: aws.String("backups"), Prefix: aws.String(canaryFolder + "/")})
	var keys []string
	areas := map[string]int{}           // backups/NAME or metadata/ferry/AREA → files checked
	plainFiles := map[string][]string{} // backup → its files that are not age-encrypted
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page.Contents {
			key := strings.TrimPrefix(*o.Key, canaryFolder+"/")
			keys = append(keys, key)
			if exempt[key] {
				c.mu.Lock()
				c.exempted++
				c.mu.Unlock()
				continue
			}
			area, backup, file := storageArea(key)
			areas[area]++
			resp, err := s3c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("backups"), Key: o.Key})
			if err != nil {
				t.Fatal(err)
			}
			data, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatalf("read %s: %v", key, err)
			}
			place := "stored " + key + " (" + when + ")"
			meta, _ := json.Marshal(resp.Metadata)
			c.check(t, "stored files' user metadata", place+", its user metadata", meta)
			c.check(t, "stored files", place, data)
			if plain, how := decompress(data); plain != nil {
				c.check(t, "stored files, decompressed", place+", "+how, plain)
			}
			if backup != "" && !bytes.HasPrefix(data, []byte("age-encryption.org/v1\n")) {
				plainFiles[backup] = append(plainFiles[backup], file)
			}
		}
	}
	c.check(t, "storage key listings", "the keys of storage ("+when+")", []byte(strings.Join(keys, "\n")))
	encrypted := 0
	for _, area := range slices.Sorted(maps.Keys(areas)) {
		_, backup, _ := storageArea(area)
		if backup == "" {
			continue
		}
		if _, m := readManifest(t, c.url, backup); m.Encryption != nil {
			encrypted++
			for _, f := range plainFiles[backup] {
				// The claim, the heartbeat, the manifest and the runs' pins (a run ID and a time,
				// whose contents are searched above like every file's) are never encrypted.
				if f != "ferry-claim.json" && f != "ferry-heartbeat.json" && f != "ferry-manifest.json" && !strings.HasPrefix(f, snapshot.PinsDir) {
					t.Errorf("LEAK: %s of the encrypted backup %s is stored unencrypted", f, backup)
				}
			}
		}
	}
	var summary []string
	for _, a := range slices.Sorted(maps.Keys(areas)) {
		summary = append(summary, fmt.Sprintf("%s %d", a, areas[a]))
	}
	t.Logf("storage %s: %d keys, %d exempt data streams of the plain backup, %d encrypted backups; files checked: %s",
		when, len(keys), len(exempt), encrypted, strings.Join(summary, ", "))
}

// storageArea is the part of storage a key is in: a backup's folder (backup and file named), a
// run's, or another folder of metadata/ferry/.
func storageArea(key string) (area, backup, file string) {
	parts := strings.SplitN(key, "/", 3)
	switch {
	case len(parts) == 3 && parts[0] == "backups":
		return "backups/" + parts[1] + "/", parts[1], parts[2]
	case len(parts) == 3 && strings.HasPrefix(parts[2], "runs/"):
		id, _, _ := strings.Cut(strings.TrimPrefix(parts[2], "runs/"), "/")
		return "metadata/ferry/runs/" + id + "/", "", ""
	case len(parts) == 3:
		sub, _, _ := strings.Cut(parts[2], "/")
		return parts[0] + "/" + parts[1] + "/" + sub + "/", "", ""
	}
	return key, "", ""
}

// checkSearchFinds reads the plain backup's data streams, which hold blue's canaries by design,
// and checks that the search finds each canary where it must be: a search that found nothing
// there would prove nothing elsewhere.
func (c *canaryCheck) checkSearchFinds(t *testing.T, exempt map[string]bool, want map[string]string) {
	t.Helper()
	ctx := context.Background()
	s3c := tb.MinIO["backup"].S3Client()
	found := map[string]bool{}
	for key := range exempt {
		resp, err := s3c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("backups"), Key: aws.String(canaryFolder + "/" + key)})
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if plain, _ := decompress(data); plain != nil {
			data = plain
		}
		for _, p := range c.set.probes {
			if bytes.Contains(data, p.bytes) {
				found[p.canary+" in "+key] = true
			}
		}
	}
	for canary, file := range want {
		if !slices.ContainsFunc(slices.Collect(maps.Keys(found)), func(f string) bool { return strings.HasPrefix(f, canary+" in ") && strings.Contains(f, file) }) {
			t.Errorf("the search does not find the %s canary in the plain backup's %s, which holds it: found %v", canary, file, slices.Sorted(maps.Keys(found)))
		}
	}
}

// decompress returns data's content when it is gzip or zstd.
func decompress(data []byte) ([]byte, string) {
	switch {
	case bytes.HasPrefix(data, []byte{0x1f, 0x8b}):
		r, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, ""
		}
		out, _ := io.ReadAll(r)
		return out, "gunzipped"
	case bytes.HasPrefix(data, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		r, err := zstd.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, ""
		}
		defer r.Close()
		out, _ := io.ReadAll(r)
		return out, "zstd-decompressed"
	}
	return nil, ""
}

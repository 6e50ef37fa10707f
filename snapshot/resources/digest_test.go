package resources

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/storage"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynfake "k8s.io/client-go/dynamic/fake"
)

var secretsPlan = &plans.Plan{Resources: []plans.Resource{
	{Version: "v1", Resource: "configmaps", Kind: "ConfigMap", Namespaced: true},
	{Version: "v1", Resource: "secrets", Kind: "Secret", Namespaced: true},
}}

func secretObj(password string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Secret",
		"metadata": map[string]any{"name": "db", "namespace": "team-a"},
		"type":     "Opaque",
		"data":     map[string]any{"password": password},
	}}
}

func configMapObj() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "settings", "namespace": "team-a"},
		"data":     map[string]any{"mode": "fast"},
	}}
}

func fakeCluster(objs ...runtime.Object) *dynfake.FakeDynamicClient {
	return dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		{Version: "v1", Resource: "secrets"}:        "SecretList",
		{Version: "v1", Resource: "configmaps"}:     "ConfigMapList",
		{Version: "v1", Resource: "resourcequotas"}: "ResourceQuotaList",
	}, objs...)
}

// backUpObjects captures the cluster's objects into a new backup of file storage.
func backUpObjects(t *testing.T, ctx context.Context, store storage.Backend, name string, cluster *dynfake.FakeDynamicClient, recipients []string) *snapshot.Manifest {
	t.Helper()
	w, err := snapshot.Create(ctx, store, name, plans.Cluster{}, secretsPlan, time.Now(), recipients)
	if err != nil {
		t.Fatal(err)
	}
	if err := (Objects{Dynamic: cluster, Plan: secretsPlan}).Capture(ctx, w); err != nil {
		t.Fatal(err)
	}
	m, err := w.Commit(ctx, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func objectNamed(m *snapshot.Manifest, resource string) snapshot.Object {
	for _, o := range m.Objects {
		if o.Resource == resource {
			return o
		}
	}
	return snapshot.Object{}
}

// A Secret's digest in the manifest is keyed with a random key of its backup, so the manifest is
// no oracle for its value; other objects keep plain SHA-256 digests. The key is a stream of the
// backup, encrypted when the backup is, and never in the manifest.
func TestSecretDigestsAreKeyed(t *testing.T) {
	ctx := context.Background()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		recipients []string
		keyFile    string
	}{
		{"plain", nil, snapshot.DigestKeyFile},
		{"encrypted", []string{id.Recipient().String()}, snapshot.DigestKeyFile + snapshot.EncryptedSuffix},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store, err := storage.NewFile(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			m1 := backUpObjects(t, ctx, store, "one", fakeCluster(secretObj("aHVudGVyMg=="), configMapObj()), tc.recipients)
			m2 := backUpObjects(t, ctx, store, "two", fakeCluster(secretObj("aHVudGVyMg=="), configMapObj()), tc.recipients)

			secretFile, _ := json.Marshal(secretObj("aHVudGVyMg==").Object)
			plain := sha256Hex(secretFile)
			s1, s2 := objectNamed(m1, "secrets"), objectNamed(m2, "secrets")
			if s1.SHA256 == plain || s1.Digest != snapshot.DigestFileHMAC {
				t.Errorf("the Secret's digest is %s of scheme %q; want a keyed one, not its plain SHA-256 %s", s1.SHA256, s1.Digest, plain)
			}
			if s1.SHA256 == s2.SHA256 {
				t.Errorf("two backups of the same Secret have the same digest %s; want a key per backup", s1.SHA256)
			}
			cmFile, _ := json.Marshal(configMapObj().Object)
			if cm := objectNamed(m1, "configmaps"); cm.SHA256 != sha256Hex(cmFile) || cm.Digest != snapshot.DigestFile {
				t.Errorf("the ConfigMap's digest is %s of scheme %q; want its file's plain SHA-256 %s", cm.SHA256, cm.Digest, sha256Hex(cmFile))
			}
			if m1.DigestKey != tc.keyFile || m1.FormatVersion != snapshot.FormatVersion {
				t.Errorf("manifest names digest key %q (format %s); want %q", m1.DigestKey, m1.FormatVersion, tc.keyFile)
			}

			r, err := snapshot.Open(ctx, store, "one", []age.Identity{id})
			if err != nil {
				t.Fatal(err)
			}
			key, err := r.DigestKey(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got, _, _ := FileDigest("secrets", secretFile, key); got != s1.SHA256 {
				t.Errorf("the Secret's digest with the stored key is %s; the manifest says %s", got, s1.SHA256)
			}
			// The key is nowhere in the manifest.
			data, _ := json.Marshal(m1)
			for _, enc := range []string{hex.EncodeToString(key), string(key)} {
				if strings.Contains(string(data), enc) {
					t.Errorf("the manifest holds the digest key")
				}
			}
		})
	}
}

// Verify of a backup with a keyed Secret digest reads the backup and compares the Secret with the
// target: identical when it is intact, different (without its values) when it changed.
func TestVerifyOfAKeyedSecret(t *testing.T) {
	ctx := context.Background()
	store, err := storage.NewFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	backUpObjects(t, ctx, store, "b", fakeCluster(secretObj("aHVudGVyMg=="), configMapObj()), nil)
	for _, tc := range []struct {
		name   string
		target string
		want   string
	}{
		{"intact", "aHVudGVyMg==", snapshot.StatusIdentical},
		{"changed", "Y2hhbmdlZA==", snapshot.StatusDifferent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := snapshot.Open(ctx, store, "b", nil)
			if err != nil {
				t.Fatal(err)
			}
			var report snapshot.Report
			c := Objects{Dynamic: fakeCluster(secretObj(tc.target), configMapObj()), WaitTimeout: time.Second}
			if err := c.Verify(ctx, r, &report); err != nil {
				t.Fatal(err)
			}
			if report.Counts["objects"][snapshot.StatusIdentical] != map[bool]int{true: 2, false: 1}[tc.want == snapshot.StatusIdentical] {
				t.Errorf("counts %v", report.Counts)
			}
			var secretItems []snapshot.ReportItem
			for _, it := range report.Items {
				if strings.Contains(it.Name, "Secret") {
					secretItems = append(secretItems, it)
				}
				if strings.Contains(it.Detail, tc.target) || strings.Contains(it.Detail, "aHVudGVyMg==") {
					t.Errorf("the report holds a value of the Secret: %s", it.Detail)
				}
			}
			if tc.want == snapshot.StatusDifferent && (len(secretItems) != 1 || secretItems[0].Status != tc.want) {
				t.Errorf("report items %+v; want the Secret %s", report.Items, tc.want)
			}
			if tc.want == snapshot.StatusIdentical && len(secretItems) != 0 {
				t.Errorf("report items %+v; want none", report.Items)
			}
		})
	}
}

// FileDigest keys exactly the objects whose content is secret, and is of the bytes stored.
func TestFileDigestSchemes(t *testing.T) {
	key := []byte(strings.Repeat("k", 32))
	for _, tc := range []struct {
		gr         string
		obj        map[string]any
		wantScheme string
	}{
		{"secrets", secretObj("YQ==").Object, snapshot.DigestFileHMAC},
		{"configmaps", configMapObj().Object, snapshot.DigestFile},
		{"deployments.apps", map[string]any{"metadata": map[string]any{"name": "web"}}, snapshot.DigestFile},
	} {
		data, _ := json.Marshal(tc.obj)
		got, scheme, err := FileDigest(tc.gr, data, key)
		if err != nil || scheme != tc.wantScheme {
			t.Errorf("%s: scheme %q, %v; want %q", tc.gr, scheme, err, tc.wantScheme)
		}
		if (got == sha256Hex(data)) != (tc.wantScheme == snapshot.DigestFile) {
			t.Errorf("%s: digest %s, plain %s", tc.gr, got, sha256Hex(data))
		}
	}
	if _, _, err := FileDigest("secrets", []byte("{}"), nil); err == nil {
		t.Error("a Secret's digest without a key: no error")
	}
	for _, scheme := range []string{"blake3", snapshot.DigestFile} {
		if _, err := DigestOf("configmaps", configMapObj().Object, scheme, nil); err == nil {
			t.Errorf("DigestOf of scheme %q: no error", scheme)
		}
	}
}

func sha256Hex(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// Each object read from an archive must be the one its manifest records: a digest that does not
// match (a writer's slip; the stream's own SHA-256 cannot tell) makes the backup corrupt, named by
// the object, before anything is applied. Large integers and keyed digests check as captured. A
// backup made before file digests records its objects' normalized forms, which depend on the
// reading ferry's rules: one that differs is drifted (named), not corrupt.
func TestArchiveObjectsMatchTheirDigests(t *testing.T) {
	ctx := context.Background()
	big := configMapObj()
	big.SetName("big")
	big.Object["spec"] = map[string]any{"limit": int64(9007199254740993), "ratio": 0.1}
	otherRules := configMapObj() // its normalized form as an older ferry's rules made it
	otherRules.Object["data"] = map[string]any{"mode": "slow"}
	legacy := func(o *snapshot.Object, obj *unstructured.Unstructured) {
		o.Digest = snapshot.DigestSHA256
		o.SHA256, _ = Digest(o.GroupResource(), obj.Object)
	}
	for _, tc := range []struct {
		name    string
		tamper  string // the resource whose manifest digest is changed
		edit    func(o *snapshot.Object)
		corrupt bool
		drifted string
	}{
		{name: "intact"},
		{name: "config map recorded otherwise", tamper: "configmaps", edit: func(o *snapshot.Object) { o.SHA256 = strings.Repeat("0", 64) }, corrupt: true},
		{name: "keyed secret recorded otherwise", tamper: "secrets", edit: func(o *snapshot.Object) { o.SHA256 = strings.Repeat("0", 64) }, corrupt: true},
		{name: "normalized digest, as recorded", tamper: "configmaps", edit: func(o *snapshot.Object) { legacy(o, configMapObj()) }},
		{name: "normalized digest, under other rules", tamper: "configmaps", edit: func(o *snapshot.Object) { legacy(o, otherRules) }, drifted: "v1 ConfigMap team-a/settings"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store, err := storage.NewFile(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			m := backUpObjects(t, ctx, store, "b", fakeCluster(secretObj("aHVudGVyMg=="), configMapObj(), big), nil)
			if tc.tamper != "" {
				for i, o := range m.Objects {
					if o.Resource == tc.tamper && o.Name != "big" {
						tc.edit(&m.Objects[i])
						break
					}
				}
				data, err := json.Marshal(m)
				if err != nil {
					t.Fatal(err)
				}
				file := snapshot.Prefix("b") + snapshot.ManifestFile
				if err := store.Delete(ctx, file); err != nil {
					t.Fatal(err)
				}
				if err := store.Create(ctx, file, strings.NewReader(string(data))); err != nil {
					t.Fatal(err)
				}
			}
			r, err := snapshot.Open(ctx, store, "b", nil)
			if err != nil {
				t.Fatal(err)
			}
			a, err := ReadArchive(ctx, r)
			switch {
			case !tc.corrupt && err != nil:
				t.Fatalf("ReadArchive: %v", err)
			case tc.corrupt && !errors.Is(err, snapshot.ErrCorrupt):
				t.Fatalf("ReadArchive: %v; want ErrCorrupt", err)
			case tc.corrupt && !strings.Contains(err.Error(), tc.tamper+" team-a/"):
				t.Errorf("ReadArchive: %v; want the object named", err)
			case !tc.corrupt && strings.Join(a.Drifted, ",") != tc.drifted:
				t.Errorf("drifted objects %q, want %q", a.Drifted, tc.drifted)
			}
			if a != nil {
				a.Close()
			}
		})
	}
}

package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/snapshot/volumes"
	"github.com/ferrykube/ferry/storage"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// TestVolumeRestoreAndVerify backs a claim of blue up, restores its contents through the Go API
// onto a claim on green (in a mapped namespace) that green's provisioner binds to a new folder,
// and checks that folder against blue's independently. Verify then finds nothing; a second
// restore touches nothing; one changed byte on green is exactly one difference; a tampered or
// truncated stored archive fails the restore. An encrypted backup restores as well, into a claim
// that binds only when its first consumer, the mover, is scheduled. With Direct, the mover reads a
// plain archive through a presigned GET, and ferry decrypts an encrypted one itself.
func TestVolumeRestoreAndVerify(t *testing.T) {
	applyPlatform(t)
	blue, bkc := clients(t, "blue")
	green, gkc := clients(t, "green")
	ctx := context.Background()
	const srcNS, dstNS, encNS, claim = "vr-lab", "vr-lab-restored", "vr-lab-encrypted", "notebook-data"

	// Blue: a claim with a few MB, hundreds of small files, symlinks, empty directories, odd
	// modes, an owner other than root's, non-ASCII names.
	createClaim(t, bkc, srcNS, claim, nil)
	src := dataDir(t, claim)
	fillVolume(t, src)
	if err := blue.BindClaim(ctx, srcNS, claim, src); err != nil {
		t.Fatal(err)
	}
	url := backupMinIO(t, "volume-restore")
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	// The tar stream, which direct movers read themselves (chunks are the default through exec).
	for _, args := range [][]string{{"--name", "vr-plain", "--volume-format", "tar"}, {"--name", "vr-encrypted", "--encrypt-to", id.Recipient().String()}} {
		start := time.Now()
		code, out, errOut := runFerry(t, append([]string{"--storage", url, "backup", "--from", "blue", "--include-namespaces", srcNS}, args...)...)
		if (code != 0 && code != 3) || strings.Contains(out, "volume "+srcNS+"/"+claim) {
			t.Fatalf("ferry backup %v exited %d\nstdout: %s\nstderr: %s", args, code, out, errOut)
		}
		t.Logf("ferry backup %v took %s", args[1], time.Since(start).Round(time.Millisecond))
	}
	store, err := storage.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	open := func(t *testing.T, name string, ids ...age.Identity) *snapshot.Reader {
		t.Helper()
		r, err := snapshot.Open(ctx, store, name, ids)
		if err != nil {
			t.Fatal(err)
		}
		// Only this test's claim: the other claims of blue have no claim on green to go to.
		r.Manifest.Volumes = slices.DeleteFunc(r.Manifest.Volumes, func(v snapshot.Volume) bool { return v.Namespace != srcNS })
		r.Manifest.Skipped = slices.DeleteFunc(r.Manifest.Skipped, func(s snapshot.Skipped) bool { return !strings.HasPrefix(s.Name, srcNS+"/") })
		if len(r.Manifest.Volumes) != 1 {
			t.Fatalf("backup %s holds %d volumes of %s", name, len(r.Manifest.Volumes), srcNS)
		}
		return r
	}
	r := open(t, "vr-plain")
	files := int(r.Manifest.Volumes[0].List.Entries)
	if files < 400 {
		t.Fatalf("the manifest lists %d files", files)
	}

	// Green: the namespace and the claim, as a restore of the objects makes them.
	if err := green.Apply(ctx, io.Discard, filepath.Join(repoDir(), "integration", "testdata", "standard-storageclass.yaml")); err != nil {
		t.Fatal(err)
	}
	createClaim(t, gkc, dstNS, claim, ptr.To("standard"))
	cfg, err := green.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	contents := volumes.Contents{Config: cfg, Client: gkc, Image: "ferry", Mapping: snapshot.Mapping{Namespaces: map[string]string{srcNS: dstNS}}}
	name := dstNS + "/" + claim
	presigner := store.(storage.Presigner)

	// What the steps pass on to the next ones.
	var (
		report    *snapshot.Report
		dst       string
		encrypted volumes.Contents
	)
	runSteps(t, step{"restore", func(t *testing.T) {
		// Restore: every file restored, nothing else reported, the folder on green as blue's.
		report = restoreVolumes(t, contents, r)
		if got := report.Counts["volumes"][snapshot.StatusRestored]; got != files || len(report.Items) != 0 {
			t.Fatalf("restore: %v, items %+v; want %d restored", report.Counts, report.Items, files)
		}
		dst = claimFolder(t, gkc, dstNS, claim)
		if want, got := walkTree(t, src), walkTree(t, dst); !slices.Equal(want, got) {
			t.Fatalf("green's folder differs from blue's:\n%s", lineDiff(want, got))
		}
		noMovers(t, gkc, dstNS)
		verifyClean(t, contents, r, files)

	}}, step{"again, nothing touched", func(t *testing.T) {
		// Again: nothing is rewritten, or even touched.
		before := inodeTimes(t, dst)
		report = restoreVolumes(t, contents, r)
		if got := report.Counts["volumes"][snapshot.StatusUnchanged]; got != files || len(report.Items) != 0 {
			t.Fatalf("second restore: %v, items %+v; want %d unchanged", report.Counts, report.Items, files)
		}
		if after := inodeTimes(t, dst); !slices.Equal(before, after) {
			t.Fatalf("the second restore touched files:\n%s", lineDiff(before, after))
		}
		verifyClean(t, contents, r, files)

	}}, step{"one byte changed on green", func(t *testing.T) {
		// One byte of one file on green: exactly that file differs.
		changed := filepath.Join(dst, "runs", "07", "metrics-107.json")
		data, err := os.ReadFile(changed)
		if err != nil {
			t.Fatal(err)
		}
		data[1] ^= 0x20
		if err := os.WriteFile(changed, data, 0); err != nil {
			t.Fatal(err)
		}
		report = &snapshot.Report{}
		if err := contents.Verify(ctx, r, report); err != nil {
			t.Fatal(err)
		}
		items := report.Problems()
		if len(items) != 1 || items[0].Name != name+":runs/07/metrics-107.json" || items[0].Status != snapshot.StatusDifferent ||
			!strings.HasPrefix(items[0].Detail, "sha256: backup ") || report.Counts["volumes"][snapshot.StatusIdentical] != files-1 {
			t.Fatalf("verify after changing one byte: %v\n%+v", report.Counts, items)
		}
		noMovers(t, gkc, dstNS)

	}}, step{"a claim the restore did not make", func(t *testing.T) {
		// A claim the objects' restore did not make: failed and missing, said plainly.
		nowhere := contents
		nowhere.Mapping = snapshot.Mapping{Namespaces: map[string]string{srcNS: "vr-not-restored"}}
		report = restoreVolumes(t, nowhere, r)
		if items := report.Problems(); len(items) != 1 || items[0].Status != snapshot.StatusFailed || items[0].Name != "vr-not-restored/"+claim ||
			!strings.Contains(items[0].Detail, "does not exist on the target") {
			t.Fatalf("restore without the claim: %+v", items)
		}
		report = &snapshot.Report{}
		if err := nowhere.Verify(ctx, r, report); err != nil {
			t.Fatal(err)
		}
		if items := report.Problems(); len(items) != 1 || items[0].Status != snapshot.StatusMissing || items[0].Name != "vr-not-restored/"+claim {
			t.Fatalf("verify without the claim: %+v", items)
		}

	}}, step{"cancelled as its mover starts", func(t *testing.T) {
		// Cancelled as its mover pod starts: the restore stops and the pod goes all the same.
		cctx, cancel := context.WithCancel(ctx)
		go wait.PollUntilContextCancel(cctx, 10*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			pods, err := gkc.CoreV1().Pods(dstNS).List(ctx, metav1.ListOptions{LabelSelector: volumes.RoleLabel + "=restore"})
			if err == nil && len(pods.Items) > 0 {
				cancel()
				return true, nil
			}
			return false, nil
		})
		if err := contents.Restore(cctx, r, &snapshot.Report{}); !errors.Is(err, context.Canceled) {
			t.Fatalf("a cancelled restore returned %v", err)
		}
		noMovers(t, gkc, dstNS)

	}}, step{"encrypted, into a claim that waits for its consumer", func(t *testing.T) {
		// An encrypted backup, into a claim that binds once the mover is scheduled.
		wffc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "vr-wait-for-consumer"}, Provisioner: "ferry.dev/testbed",
			VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer), ReclaimPolicy: ptr.To(corev1.PersistentVolumeReclaimRetain)}
		if _, err := gkc.StorageV1().StorageClasses().Create(ctx, wffc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		createClaim(t, gkc, encNS, claim, ptr.To(wffc.Name))
		encrypted = volumes.Contents{Config: cfg, Client: gkc, Image: "ferry", Mapping: snapshot.Mapping{Namespaces: map[string]string{srcNS: encNS}}}
		er := open(t, "vr-encrypted", id)
		if !strings.HasSuffix(er.Manifest.Volumes[0].Key, snapshot.EncryptedSuffix) {
			t.Fatalf("volume key %s is not encrypted", er.Manifest.Volumes[0].Key)
		}
		report = restoreVolumes(t, encrypted, er)
		if got := report.Counts["volumes"][snapshot.StatusRestored]; got != files || len(report.Items) != 0 {
			t.Fatalf("encrypted restore: %v, items %+v", report.Counts, report.Items)
		}
		if want, got := walkTree(t, src), walkTree(t, claimFolder(t, gkc, encNS, claim)); !slices.Equal(want, got) {
			t.Fatalf("the encrypted restore differs from blue's folder:\n%s", lineDiff(want, got))
		}
		verifyClean(t, encrypted, er, files)

	}}, step{"direct", func(t *testing.T) {
		// Direct: the mover reads the plain archive from the backup MinIO itself, through a GET
		// presigned for it alone; the encrypted backup's volume ferry decrypts and streams through exec,
		// and says so once: a mover never gets the age identity.
		for _, b := range []struct {
			backup string
			ids    []age.Identity
			ns     string
		}{{"vr-plain", nil, "vr-lab-direct-plain"}, {"vr-encrypted", []age.Identity{id}, "vr-lab-direct"}} {
			createClaim(t, gkc, b.ns, claim, ptr.To("standard"))
			var logs bytes.Buffer
			direct := volumes.Contents{Config: cfg, Client: gkc, Image: "ferry", Direct: presigner, Mapping: snapshot.Mapping{Namespaces: map[string]string{srcNS: b.ns}},
				Log: slog.New(slog.NewTextHandler(&logs, nil))}
			br := open(t, b.backup, b.ids...)
			report = restoreVolumes(t, direct, br)
			if got := report.Counts["volumes"][snapshot.StatusRestored]; got != files || len(report.Items) != 0 {
				t.Fatalf("direct restore of %s: %v, items %+v", b.backup, report.Counts, report.Items)
			}
			if want, got := walkTree(t, src), walkTree(t, claimFolder(t, gkc, b.ns, claim)); !slices.Equal(want, got) {
				t.Fatalf("the direct restore of %s differs from blue's folder:\n%s", b.backup, lineDiff(want, got))
			}
			if v := br.Manifest.Volumes[0]; v.Format != "" {
				t.Fatalf("backup %s stored its volume as %q, want the tar stream", b.backup, v.Format)
			}
			if strings.Contains(logs.String(), "restoring through exec") {
				t.Fatalf("direct restore of %s went through exec:\n%s", b.backup, logs.String())
			}
			said := strings.Count(logs.String(), "ferry decrypts its volumes")
			if want := min(len(b.ids), 1); said != want {
				t.Fatalf("direct restore of %s: the log says %d times that ferry decrypts, want %d:\n%s", b.backup, said, want, logs.String())
			}
			for _, secret := range []string{"AGE-SECRET-KEY", "X-Amz-Signature", tb.MinIO["backup"].SecretKey} {
				if strings.Contains(logs.String(), secret) {
					t.Fatalf("direct restore of %s: the log holds %q", b.backup, secret)
				}
			}
			verifyClean(t, direct, br, files)
			noMovers(t, gkc, b.ns)
		}

	}}, step{"a corrupt archive fails the restore", func(t *testing.T) {
		// A stored archive with one byte changed, and one cut short, plain or encrypted, read through
		// ferry or by the mover: the restore fails, saying the backup is corrupt, never succeeds
		// silently.
		for _, b := range []struct {
			backup string
			ids    []age.Identity
			c      volumes.Contents
			ns     string
		}{{"vr-plain", nil, contents, dstNS}, {"vr-encrypted", []age.Identity{id}, encrypted, encNS}} {
			direct := b.c
			direct.Direct = presigner
			key := snapshot.Prefix(b.backup) + open(t, b.backup, b.ids...).Manifest.Volumes[0].Key
			stored := getObject(t, store, key)
			for what, bad := range map[string][]byte{"tampered": flipByte(stored, len(stored)/2), "truncated": stored[:len(stored)*2/3]} {
				if err := store.Put(ctx, key, bytes.NewReader(bad)); err != nil {
					t.Fatal(err)
				}
				for mode, c := range map[string]volumes.Contents{"through ferry": b.c, "direct": direct} {
					report = &snapshot.Report{}
					err := c.Restore(ctx, open(t, b.backup, b.ids...), report)
					failed := report.Problems(snapshot.StatusFailed)
					if !errors.Is(err, snapshot.ErrCorrupt) || len(failed) == 0 || failed[0].Name != b.ns+"/"+claim ||
						!strings.Contains(failed[0].Detail, snapshot.ErrCorrupt.Error()) {
						t.Fatalf("restore %s of a %s archive of %s: error %v, report %v %+v", mode, what, b.backup, err, report.Counts, report.Items)
					}
					t.Logf("%s %s, %s: %s", what, b.backup, mode, failed[0].Detail)
					noMovers(t, gkc, b.ns)
				}
			}
			if err := store.Put(ctx, key, bytes.NewReader(stored)); err != nil {
				t.Fatal(err)
			}
		}
	}})
}

// createClaim creates the namespace (if missing) and a 1 GiB ReadWriteOnce claim.
func createClaim(t testing.TB, kc kubernetes.Interface, ns, claim string, class *string) {
	t.Helper()
	ctx := context.Background()
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: claim},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: class,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	if _, err := kc.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// fillVolume writes what users keep in a notebook's volume.
func fillVolume(t *testing.T, dir string) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	big := make([]byte, 3<<20+7)
	rand.NewChaCha8([32]byte{5}).Read(big)
	must(os.MkdirAll(filepath.Join(dir, "model"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "model", "weights.bin"), big, 0o644))
	for i := range 400 {
		sub := filepath.Join(dir, "runs", fmt.Sprintf("%02d", i%20))
		must(os.MkdirAll(sub, 0o755))
		must(os.WriteFile(filepath.Join(sub, fmt.Sprintf("metrics-%03d.json", i)), []byte(fmt.Sprintf(`{"run": %d, "loss": 0.%03d}`, i, i)), 0o644))
	}
	for name, mode := range map[string]fs.FileMode{"données-été.csv": 0o400, "日本語のノート.md": 0o754, "shared/notes.txt": 0o660} {
		must(os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755))
		must(os.WriteFile(filepath.Join(dir, name), []byte(name+"\n"), 0o600))
		must(os.Chmod(filepath.Join(dir, name), mode))
	}
	must(os.Chmod(filepath.Join(dir, "shared"), 0o770|fs.ModeSetgid))
	must(os.Lchown(filepath.Join(dir, "shared", "notes.txt"), 1000, 100))
	must(os.MkdirAll(filepath.Join(dir, "empty", "deeper"), 0o711))
	must(os.Symlink("model/weights.bin", filepath.Join(dir, "latest")))
	must(os.Symlink("../nowhere", filepath.Join(dir, "dangling")))
	old := time.Date(2023, 3, 4, 5, 6, 7, 0, time.UTC)
	must(os.Chtimes(filepath.Join(dir, "model", "weights.bin"), old, old))
}

// folderState is walkTree of a folder and the folder's own mode and time: what a restore that
// must not touch a claim's folder has to leave as it was.
func folderState(t *testing.T, dir string) []string {
	t.Helper()
	root, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	return append(walkTree(t, dir), fmt.Sprintf(". %v %s", root.Mode(), root.ModTime().UTC().Format(time.RFC3339Nano)))
}

// walkTree lists a folder, one line per entry: path, type, mode, owner, size, SHA-256 or target,
// and time for files and directories, hashed here independently of ferry.
func walkTree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		st := info.Sys().(*syscall.Stat_t)
		line := fmt.Sprintf("%s %v %d:%d", rel, info.Mode(), st.Uid, st.Gid)
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			line += " -> " + link
		case info.Mode().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(data)
			line += fmt.Sprintf(" %d %s %s", len(data), hex.EncodeToString(sum[:]), info.ModTime().UTC().Format(time.RFC3339Nano))
		default:
			line += " " + info.ModTime().UTC().Format(time.RFC3339Nano)
		}
		out = append(out, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// inodeTimes lists every entry's modification and change times: writing, renaming, chmod or
// touching an entry moves one of them.
func inodeTimes(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	eachStat(t, dir, func(p string, st *syscall.Stat_t) {
		out = append(out, fmt.Sprintf("%s mtime %d.%09d ctime %d.%09d", p, st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec))
	})
	return out
}

// eachStat calls fn with every entry of dir (dir too) and its lstat.
func eachStat(t *testing.T, dir string, fn func(path string, st *syscall.Stat_t)) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		fn(p, &st)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func lineDiff(want, got []string) string {
	var b strings.Builder
	for _, l := range want {
		if !slices.Contains(got, l) {
			fmt.Fprintf(&b, "- %s\n", l)
		}
	}
	for _, l := range got {
		if !slices.Contains(want, l) {
			fmt.Fprintf(&b, "+ %s\n", l)
		}
	}
	return b.String()
}

// claimFolder is the local folder of the hostPath volume the claim is bound to.
func claimFolder(t *testing.T, kc kubernetes.Interface, ns, claim string) string {
	t.Helper()
	ctx := context.Background()
	pvc, err := kc.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim, metav1.GetOptions{})
	if err != nil || pvc.Spec.VolumeName == "" {
		t.Fatalf("claim %s/%s is not bound (%v)", ns, claim, err)
	}
	pv, err := kc.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil || pv.Spec.HostPath == nil {
		t.Fatalf("volume %s of %s/%s: %v", pvc.Spec.VolumeName, ns, claim, err)
	}
	return pv.Spec.HostPath.Path
}

func restoreVolumes(t *testing.T, c volumes.Contents, r *snapshot.Reader) *snapshot.Report {
	t.Helper()
	report := &snapshot.Report{}
	start := time.Now()
	if err := c.Restore(context.Background(), r, report); err != nil {
		t.Fatalf("restore: %v (report %+v)", err, report.Items)
	}
	t.Logf("restore took %s: %v", time.Since(start).Round(time.Millisecond), report.Counts["volumes"])
	return report
}

func verifyClean(t *testing.T, c volumes.Contents, r *snapshot.Reader, files int) {
	t.Helper()
	report := &snapshot.Report{}
	start := time.Now()
	if err := c.Verify(context.Background(), r, report); err != nil {
		t.Fatal(err)
	}
	t.Logf("verify took %s", time.Since(start).Round(time.Millisecond))
	if got := report.Counts["volumes"][snapshot.StatusIdentical]; got != files || len(report.Items) != 0 {
		t.Fatalf("verify: %v, items %+v; want %d identical", report.Counts, report.Items, files)
	}
}

// noMovers fails if mover pods are left in the namespace.
func noMovers(t *testing.T, kc kubernetes.Interface, ns string) {
	t.Helper()
	// kwok removes a deleted pod bound to a node: on a loaded machine that can take a while.
	waitUntil(t, "mover pods gone from "+ns, 90*time.Second, func(ctx context.Context) (bool, error) {
		pods, err := kc.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: volumes.MoverLabel + "=ferry-mover"})
		return err == nil && len(pods.Items) == 0, err
	})
}

func getObject(t *testing.T, store storage.Backend, key string) []byte {
	t.Helper()
	rc, err := store.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func flipByte(data []byte, at int) []byte {
	out := bytes.Clone(data)
	out[at] ^= 0xff
	return out
}

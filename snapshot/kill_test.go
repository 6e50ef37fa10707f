package snapshot

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/storage"
)

// killPoints is a backend that, after every write or delete, checks what a ferry killed right
// then would leave: storage writes are atomic (a file is there whole or not at all), so the
// state after the n-th write is the state of a kill at any point before the (n+1)-th.
type killPoints struct {
	storage.Backend
	t     *testing.T
	ops   []string
	check func(t *testing.T, op string)
}

func (k *killPoints) after(op string) {
	k.ops = append(k.ops, op)
	if k.check != nil {
		k.check(k.t, op)
	}
}

func (k *killPoints) Put(ctx context.Context, key string, r io.Reader) error {
	if err := k.Backend.Put(ctx, key, r); err != nil {
		return err
	}
	k.after("put " + strings.TrimPrefix(key, "backups/"))
	return nil
}

func (k *killPoints) Create(ctx context.Context, key string, r io.Reader) error {
	if err := k.Backend.Create(ctx, key, r); err != nil {
		return err
	}
	k.after("create " + strings.TrimPrefix(key, "backups/"))
	return nil
}

func (k *killPoints) Delete(ctx context.Context, key string) error {
	if err := k.Backend.Delete(ctx, key); err != nil {
		return err
	}
	k.after("delete " + strings.TrimPrefix(key, "backups/"))
	return nil
}

// writeLikeKindsBackup writes a backup in the order kinds.Backup does: the claim, the heartbeat,
// each kind's streams, Velero's metadata when not encrypted, the manifest, and the heartbeat's
// removal.
func writeLikeKindsBackup(t *testing.T, store storage.Backend, name string, recipients []string) {
	t.Helper()
	ctx := context.Background()
	w, err := Create(ctx, store, name, plans.Cluster{}, &plans.Plan{}, time.Now(), recipients)
	if err != nil {
		t.Fatal(err)
	}
	beat, err := StartHeartbeat(ctx, store, name, time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{name + ".tar.gz", name + "-resource-list.json.gz", "databases/kfp.sql.zst", "buckets/mlpipeline/a", "volumes/ns/data.tar.zst"} {
		if _, err := w.Put(ctx, f, strings.NewReader("data of "+f)); err != nil {
			t.Fatal(err)
		}
	}
	if !w.Encrypted() {
		if err := w.PutPlain(ctx, VeleroFile, strings.NewReader(fmt.Sprintf(veleroMeta, name))); err != nil {
			t.Fatal(err)
		}
		w.SetVeleroCompatible(true)
	}
	if _, err := w.Commit(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := beat.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

// stateAt lists the backup, and describes it once its heartbeat (of an hour) is stale.
func stateAt(t *testing.T, store storage.Backend, name string) (now, later string) {
	t.Helper()
	infos, err := List(context.Background(), store)
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	for _, i := range infos {
		if i.Name == name {
			now = i.State
		}
	}
	if now == "" {
		return "", ""
	}
	d, err := Describe(context.Background(), store, name, time.Now().Add(StaleBeats*time.Hour+time.Minute))
	if err != nil {
		t.Fatalf("describe: %v", err)
	}
	return now, d.State
}

// A ferry killed after any write of a backup leaves nothing that lists as complete before the
// manifest is written, and nothing that ever lists as Velero's; what it leaves cannot be opened.
func TestKilledAtEveryWriteOfABackup(t *testing.T) {
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name       string
		recipients []string
	}{{"plain", nil}, {"encrypted", []string{id.Recipient().String()}}} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			kp := &killPoints{Backend: newStore(t), t: t}
			committed := false
			kp.check = func(t *testing.T, op string) {
				if op == "create b/"+ManifestFile {
					committed = true
				}
				now, later := stateAt(t, kp.Backend, "b")
				want, wantLater := []string{Running, Incomplete}, []string{Incomplete}
				if committed {
					want, wantLater = []string{Complete}, []string{Complete}
				}
				if !contains(want, now) || !contains(wantLater, later) {
					t.Errorf("killed after %q: lists as %s, an hour later %s; want %v, %v", op, now, later, want, wantLater)
				}
				r, err := Open(ctx, kp.Backend, "b", []age.Identity{id})
				switch {
				case committed && (err != nil || r.Velero):
					t.Errorf("killed after %q: Open of the complete backup: %v", op, err)
				case !committed && (err == nil || !badinput.Is(err)):
					t.Errorf("killed after %q: Open: %v; want it refused as bad input", op, err)
				}
			}
			writeLikeKindsBackup(t, kp, "b", tt.recipients)
			t.Logf("%d writes checked: %s", len(kp.ops), strings.Join(kp.ops, ", "))
			if len(kp.ops) < 8 {
				t.Fatalf("only %d writes", len(kp.ops))
			}
		})
	}
}

// ferry backups delete killed after any removal leaves nothing that lists as complete or
// Velero's, of a ferry backup (Velero-compatible) and of one Velero wrote.
func TestKilledAtEveryDelete(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		name  string
		write func(t *testing.T, store storage.Backend)
	}{
		{"ferry's", func(t *testing.T, store storage.Backend) { writeLikeKindsBackup(t, store, "b", nil) }},
		{"Velero's", func(t *testing.T, store storage.Backend) {
			for _, f := range []string{"b-logs.gz", "b.tar.gz", "b-resource-list.json.gz", "b-volumeinfo.json.gz", VeleroFile} {
				if err := store.Put(ctx, Prefix("b")+f, strings.NewReader(fmt.Sprintf(veleroMeta, "b"))); err != nil {
					t.Fatal(err)
				}
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			store := newStore(t)
			tt.write(t, store)
			if now, _ := stateAt(t, store, "b"); now != Complete && now != Velero {
				t.Fatalf("before the delete: %s", now)
			}
			kp := &killPoints{Backend: store, t: t, check: func(t *testing.T, op string) {
				now, later := stateAt(t, store, "b")
				if now == Complete || now == Velero || later == Complete || later == Velero {
					t.Errorf("delete killed after %q: lists as %s, an hour later %s", op, now, later)
				}
				if _, err := Open(ctx, store, "b", nil); err == nil {
					t.Errorf("delete killed after %q: Open succeeds", op)
				}
			}}
			if _, err := Delete(ctx, kp, "b"); err != nil {
				t.Fatal(err)
			}
			t.Logf("%d removals checked: %s", len(kp.ops), strings.Join(kp.ops, ", "))
		})
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

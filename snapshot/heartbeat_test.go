package snapshot

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/storage"
)

func TestHeartbeatTellsLiveFromDeadRuns(t *testing.T) {
	ctx := context.Background()
	store := newStore(t)
	if st, err := CheckRun(ctx, store, "b1", time.Now()); err != nil || st.State != RunGone {
		t.Fatalf("before the backup: %+v, %v; want gone", st, err)
	}
	w, err := Create(ctx, store, "b1", plans.Cluster{}, &plans.Plan{}, time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	// Long enough that a loaded machine still writes each beat before StaleBeats of them pass.
	const interval = 250 * time.Millisecond
	beat, err := StartHeartbeat(ctx, store, "b1", interval, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { beat.Stop(ctx) }) // a failure must not leave it writing into the test's folder
	first := readBeat(t, store, "b1")
	if first.Backup != "b1" || first.Run != beat.Run() || first.Interval != "250ms" || len(first.Run) != 16 {
		t.Fatalf("heartbeat %+v", first)
	}
	deadline := time.Now().Add(5 * time.Second)
	for readBeat(t, store, "b1").At.Equal(first.At) {
		if time.Now().After(deadline) {
			t.Fatal("the heartbeat was not rewritten")
		}
		time.Sleep(interval)
	}
	st, err := CheckRun(ctx, store, "b1", time.Now())
	if err != nil || st.State != RunLive || st.Run != beat.Run() || st.LastBeat.IsZero() {
		t.Fatalf("while running: %+v, %v; want live", st, err)
	}
	// A fresh heartbeat without a manifest: running.
	if infos, _ := List(ctx, store); len(infos) != 1 || infos[0].State != Running {
		t.Fatalf("listing a running backup: %+v", infos)
	}

	// A killed ferry leaves its heartbeat behind, which goes stale.
	if st, _ := CheckRun(ctx, store, "b1", time.Now().Add(StaleBeats*interval+time.Second)); st.State != RunDead {
		t.Fatalf("with a stale heartbeat: %+v, want dead", st)
	}
	if err := beat.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Stat(ctx, Prefix("b1")+HeartbeatFile); err == nil {
		t.Fatal("Stop left the heartbeat")
	}
	time.Sleep(3 * interval) // no write after Stop
	if _, err := store.Stat(ctx, Prefix("b1")+HeartbeatFile); err == nil {
		t.Fatal("the heartbeat came back after Stop")
	}
	if st, _ := CheckRun(ctx, store, "b1", time.Now()); st.State != RunDead {
		t.Fatalf("incomplete without a heartbeat: %+v, want dead", st)
	}
	if _, err := w.Commit(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	if st, _ := CheckRun(ctx, store, "b1", time.Now()); st.State != RunComplete {
		t.Fatalf("after the manifest: %+v, want complete", st)
	}
	if _, err := Delete(ctx, store, "b1"); err != nil {
		t.Fatal(err)
	}
	if st, _ := CheckRun(ctx, store, "b1", time.Now()); st.State != RunGone {
		t.Fatalf("after delete: %+v, want gone", st)
	}
}

// An interrupted backup, heartbeat and all, lists as incomplete and deletes cleanly.
func TestHeartbeatOfKilledRunListsIncompleteAndDeletes(t *testing.T) {
	ctx := context.Background()
	store := newStore(t)
	if _, err := Create(ctx, store, "b2", plans.Cluster{}, &plans.Plan{}, time.Now(), nil); err != nil {
		t.Fatal(err)
	}
	bctx, kill := context.WithCancel(ctx)
	if _, err := StartHeartbeat(bctx, store, "b2", time.Hour, nil); err != nil {
		t.Fatal(err)
	}
	kill() // the process dies: nobody calls Stop
	// Its heartbeat (of an hour's interval) is still fresh: running, until it goes stale.
	infos, err := List(ctx, store)
	if err != nil || len(infos) != 1 || infos[0].State != Running || infos[0].Files != 2 {
		t.Fatalf("list: %+v, %v", infos, err)
	}
	if n, err := Delete(ctx, store, "b2"); err != nil || n != 2 {
		t.Fatalf("delete removed %d files: %v", n, err)
	}
	if infos, _ := List(ctx, store); len(infos) != 0 {
		t.Fatalf("after delete: %+v", infos)
	}
}

func readBeat(t *testing.T, store storage.Reader, name string) Heartbeat {
	t.Helper()
	rc, err := store.Get(context.Background(), Prefix(name)+HeartbeatFile)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var hb Heartbeat
	if err := json.NewDecoder(rc).Decode(&hb); err != nil {
		t.Fatal(err)
	}
	return hb
}

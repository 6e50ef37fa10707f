package migrate

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/storage"
)

// FuzzJournalEvent: no event file of a run's journal makes OpenJournal panic, and every error
// names the run and the event's file. The seeds are events as Append writes them.
func FuzzJournalEvent(f *testing.F) {
	ctx := context.Background()
	store, err := storage.NewFile(f.TempDir())
	if err != nil {
		f.Fatal(err)
	}
	j, err := CreateJournal(ctx, store, Run{ID: "run-seed", Blue: plans.Cluster{Context: "blue"}, Green: plans.Cluster{Context: "green"},
		CreatedAt: time.Now().UTC(), Backup: "migrate-run-seed"})
	if err != nil {
		f.Fatal(err)
	}
	for _, e := range []Event{
		{State: Preflighted, Phase: Begin},
		{State: BackedUp, Phase: Done, Detail: "backup migrate-run-seed: 3 objects", Data: json.RawMessage(`{"objects":3}`)},
		{State: Shifting, Phase: Paused, Step: 2, Detail: "gate inconclusive"},
		{State: Shifting, Phase: Note, Detail: "green-may-take-writes"},
		{State: Restored, Phase: Failed, Detail: "restore: 1 item failed"},
	} {
		if _, err := j.Append(ctx, e); err != nil {
			f.Fatal(err)
		}
	}
	var keys []string
	store.List(ctx, runPrefix("run-seed")+"events/", func(o storage.ObjectInfo) error { keys = append(keys, o.Key); return nil })
	for _, k := range keys {
		rc, err := store.Get(ctx, k)
		if err != nil {
			f.Fatal(err)
		}
		var buf bytes.Buffer
		buf.ReadFrom(rc)
		rc.Close()
		f.Add(buf.Bytes())
	}
	f.Add([]byte(`{"seq":1,"state":"no-such-state","phase":"begin","step":-1}`))
	f.Add([]byte(`[]`))

	key := runPrefix("run-fuzz") + "events/00000001.json"
	if _, err := CreateJournal(ctx, store, Run{ID: "run-fuzz", CreatedAt: time.Now().UTC(), Backup: "b"}); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := store.Put(ctx, key, bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
		j, err := OpenJournal(ctx, store, "run-fuzz")
		if err != nil {
			if msg := err.Error(); !strings.Contains(msg, "run-fuzz") || !strings.Contains(msg, "00000001.json") {
				t.Fatalf("error does not name the run and the event's file: %v", err)
			}
			return
		}
		// What a journal that decodes is asked when a run resumes.
		j.Current()
		j.Events()
		for _, s := range append(append([]State{}, Forward...), CarryBackStates...) {
			j.IsDone(s, 0)
			j.Last(s, Done, 0)
		}
	})
}

package snapshot

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ferrykube/ferry/storage"
)

// PinsDir holds, under a backup's folder, one record per migration run that uses the backup:
// ferry-pins/<run>.json, a Pin. Prune keeps a complete backup a run pinned; deleting the backup
// removes its pins with it. A run pins a backup before it writes it, so that it is never
// unpinned once complete.
const PinsDir = "ferry-pins/"

// Pin is the record a run keeps under a backup it uses.
type Pin struct {
	Run      string    `json:"run"`
	PinnedAt time.Time `json:"pinnedAt"`
}

// PinBackup records that run uses backup. Pinning again rewrites the record.
func PinBackup(ctx context.Context, store storage.Backend, backup, run string, now time.Time) error {
	if err := CheckName(backup); err != nil {
		return err
	}
	if run == "" || strings.ContainsAny(run, "/\\") || strings.HasPrefix(run, ".") {
		return fmt.Errorf("pin backup %s: %q does not name a run", backup, run)
	}
	data, err := json.Marshal(Pin{Run: run, PinnedAt: now.UTC()})
	if err != nil {
		return err
	}
	if err := store.Put(ctx, Prefix(backup)+PinsDir+run+".json", bytes.NewReader(data)); err != nil {
		return fmt.Errorf("pin backup %s for run %s: %w", backup, run, err)
	}
	return nil
}

// pinnedBy is the run a file of a backup's folder pins it for, if it is a pin.
func pinnedBy(file string) (string, bool) {
	rest, ok := strings.CutPrefix(file, PinsDir)
	if !ok {
		return "", false
	}
	run, ok := strings.CutSuffix(rest, ".json")
	return run, ok && run != "" && !strings.Contains(run, "/")
}

// addPin keeps runs sorted and without repeats.
func addPin(runs []string, run string) []string {
	if i, found := slices.BinarySearch(runs, run); !found {
		runs = slices.Insert(runs, i, run)
	}
	return runs
}

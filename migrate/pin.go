package migrate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/storage"
)

// pin records under backup that the run uses it, so that prune keeps it (snapshot.PinBackup).
func (r *Runner) pin(ctx context.Context, backup string) error {
	return snapshot.PinBackup(ctx, r.o.Store, backup, r.Journal.Run.ID, time.Now())
}

// UnpinnedBackups names the backups runs recorded before runs pinned their backups use (the run's
// own and its carry-back's), with the runs that use each, sorted: prune keeps them as it keeps
// pinned ones. It reads each such run's run.json only.
func UnpinnedBackups(ctx context.Context, store storage.Backend) (map[string][]string, error) {
	ids, err := ListRuns(ctx, store)
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	out := map[string][]string{}
	for _, id := range ids {
		var run Run
		if err := readJSON(ctx, store, runPrefix(id)+"run.json", &run); err != nil {
			if errors.Is(err, storage.ErrNotExist) {
				continue // removed since the listing, or a run that never began
			}
			return nil, fmt.Errorf("run %s: %w", id, err)
		}
		if run.Pins {
			continue
		}
		for _, b := range []string{run.Backup, CarryBackName(run.ID)} {
			if b != "" && !slices.Contains(out[b], id) {
				out[b] = append(out[b], id)
				slices.Sort(out[b])
			}
		}
	}
	return out, nil
}

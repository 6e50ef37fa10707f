package snapshot

import (
	"context"
	"errors"
)

// Kind is one kind of data a backup holds, each in its package under snapshot/ (resources,
// volumes, databases, buckets). The orchestrators (ferry backup, restore, verify, migrate) treat
// every kind alike: a kind value carries the clients of the cluster it works on — the source when
// capturing, the target when restoring and verifying.
type Kind interface {
	Capturer
	Restorer
}

// Capturer is the backup side of a kind.
type Capturer interface {
	// Name says what the kind holds, for logs, errors and reports: "objects", "volumes",
	// "databases", "buckets".
	Name() string
	// Capture writes the kind's data into the backup and records it, or what it skipped, in the
	// manifest.
	Capture(ctx context.Context, w *Writer) error
}

// Restorer is the restore side of a kind.
type Restorer interface {
	Name() string
	// Restore puts the kind's data of the backup onto the cluster, recording every item it restored,
	// left as it was, skipped or failed in the report. Restoring twice changes nothing the second
	// time. An error means the kind could not go on at all; per-item failures go to the report.
	Restore(ctx context.Context, r *Reader, report *Report) error
	// Verify compares the cluster with the backup item by item and records every item that is
	// missing or different (named exactly) in the report, and how many were identical.
	Verify(ctx context.Context, r *Reader, report *Report) error
}

// Prechecker is a Restorer that can tell, before a restore applies anything to the cluster, that
// it could not restore some of the backup there (a claim the cluster holds but cannot give a
// volume): Precheck records each such item in the report, and its error, ErrRefused for those,
// stops the restore with nothing applied.
type Prechecker interface {
	Precheck(ctx context.Context, r *Reader, report *Report) error
}

// ErrRefused is returned by a restore that found, before it applied anything, that the cluster
// cannot take some of the backup (Prechecker): the report names what, and what must be fixed.
var ErrRefused = errors.New("refused before anything was applied")

package snapshot

import (
	"context"
	"sync"
)

// Fill lets a restore's kinds overlap without a workload starting on an empty volume: the objects'
// restore says when the claims exist, the volumes are filled from then on, and the objects whose
// pods mount a claim the backup holds files of are created only once the volumes are filled. The
// kinds that need the workloads (databases and buckets, restored through their servers' pods)
// start as soon as the objects' restore has made everything but those held objects.
//
// Each signal is given once; later ones are ignored. A nil *Fill does not coordinate anything:
// its waits return at once.
type Fill struct {
	claims, objects, filled chan struct{}

	mu          sync.Mutex
	objectsErr  error
	claimsOnce  sync.Once
	objectsOnce sync.Once
	filledOnce  sync.Once
}

// NewFill returns a Fill whose signals are all still to come.
func NewFill() *Fill {
	return &Fill{claims: make(chan struct{}), objects: make(chan struct{}), filled: make(chan struct{})}
}

// ClaimsExist says that every claim of the backup the restore makes has been made.
func (f *Fill) ClaimsExist() {
	if f != nil {
		f.claimsOnce.Do(func() { close(f.claims) })
	}
}

// ObjectsReady says that the objects' restore made everything but the objects it holds for the
// volumes; err, when not nil, says it stopped instead, and every wait for the claims or the
// objects returns it. It also means the claims exist (or never will).
func (f *Fill) ObjectsReady(err error) {
	if f == nil {
		return
	}
	f.objectsOnce.Do(func() {
		f.mu.Lock()
		f.objectsErr = err
		f.mu.Unlock()
		// The objects first: a wait for the claims that this wakes must find them stopped.
		close(f.objects)
		f.ClaimsExist()
	})
}

// Filled says that the volumes' restore is over, whatever its outcome (the report has it).
func (f *Fill) Filled() {
	if f != nil {
		f.filledOnce.Do(func() { close(f.filled) })
	}
}

// WaitClaims returns once the claims exist, with the objects' error if they stopped first.
func (f *Fill) WaitClaims(ctx context.Context) error {
	if f == nil {
		return nil
	}
	select {
	case <-f.claims:
	case <-ctx.Done():
		return ctx.Err()
	}
	return f.errIfStopped()
}

// WaitObjects returns once the objects' restore made all but the held objects, or with its error.
func (f *Fill) WaitObjects(ctx context.Context) error {
	if f == nil {
		return nil
	}
	select {
	case <-f.objects:
	case <-ctx.Done():
		return ctx.Err()
	}
	return f.objectsError()
}

// WaitFilled returns once the volumes' restore is over.
func (f *Fill) WaitFilled(ctx context.Context) error {
	if f == nil {
		return nil
	}
	select {
	case <-f.filled:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// errIfStopped is the objects' error once they have signalled, else nil: claims that exist while
// the objects go on are no error.
func (f *Fill) errIfStopped() error {
	select {
	case <-f.objects:
		return f.objectsError()
	default:
		return nil
	}
}

func (f *Fill) objectsError() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.objectsErr
}

// FillingRestorer is a Restorer that can hold back what would start on the volumes until they are
// filled: the objects' restore. RestoreFilling is Restore with the Fill's signals given and
// waited on; with a nil Fill it is Restore.
type FillingRestorer interface {
	Restorer
	RestoreFilling(ctx context.Context, r *Reader, report *Report, fill *Fill) error
}

// ClaimFiller is a Restorer that needs only the claims to exist, not the workloads: the volumes'
// restore, which mounts each claim in a pod of its own.
type ClaimFiller interface {
	Restorer
	FillsClaims()
}

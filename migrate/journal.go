// Package migrate is the blue-green run: a state machine whose every transition is written to a
// journal in storage before it is acted on, so that an interrupted run resumes without repeating a
// finished step; quiesce of the writers, traffic shifts behind gates, rollback.
package migrate

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/plans/config"
	"github.com/ferrykube/ferry/storage"
)

// State is a state of a run.
type State string

// The states of a run, in order; RolledBack is reachable from any state after Quiesced.
const (
	Planned     State = "planned"
	Preflighted State = "preflighted"
	// Staged is a warm run's pre-copy while blue is live: each round is a step (Event.Step is the
	// round), and step 0 ends the state once a round's delta was small enough or the rounds ran out.
	Staged     State = "staged"
	Quiesced   State = "quiesced"
	BackedUp   State = "backed-up"
	Restored   State = "restored"
	Verified   State = "verified"
	Shifting   State = "shifting"
	Shifted    State = "shifted"
	Finalized  State = "finalized"
	RolledBack State = "rolled-back"
)

// The states of a carry-back (ferry rollback --carry-back), between the forward run's last state
// and RolledBack: green's writers stopped, green backed up, that backup restored onto blue
// (replacing blue's copies), blue verified against it.
const (
	GreenQuiesced State = "green-quiesced"
	GreenBackedUp State = "green-backed-up"
	CarriedBack   State = "carried-back"
	BlueVerified  State = "blue-verified"
)

// Forward is the order of the forward run.
var Forward = []State{Planned, Preflighted, Staged, Quiesced, BackedUp, Restored, Verified, Shifting, Shifted, Finalized}

// CarryBackStates are the steps of a carry-back, in order; RolledBack ends it.
var CarryBackStates = []State{GreenQuiesced, GreenBackedUp, CarriedBack, BlueVerified}

// Phases of an event.
const (
	Begin  = "begin"  // the step is about to be acted on
	Done   = "done"   // the step finished; never repeated
	Failed = "failed" // the step failed; the run stops in the previous state
	Paused = "paused" // a gate was inconclusive; resume continues the step
	Note   = "note"   // something worth keeping (a flip by hand, a lease taken over)
)

// RunsPrefix is where run journals live in storage, inside Velero's allowed top-level folders;
// a run pins the backups it uses under each backup (snapshot.PinBackup).
const RunsPrefix = "metadata/ferry/runs/"

// Run is what a run is about, written once when it starts.
type Run struct {
	ID        string        `json:"id"`
	Blue      plans.Cluster `json:"blue"`
	Green     plans.Cluster `json:"green"`
	Config    config.Config `json:"config"`
	CreatedAt time.Time     `json:"createdAt"`
	// Backup is the name of the run's backup.
	Backup string `json:"backup"`
	// Upgrade is set for an upgrade onto a green that runs the platform's new release: only the
	// state moves (plans.PlanUpgrade), with what --leave-behind keeps on blue.
	Upgrade *plans.UpgradeOptions `json:"upgrade,omitempty"`
	// Pins says the run pins the backups it uses (snapshot.PinBackup); runs recorded before runs
	// did are read by UnpinnedBackups.
	Pins bool `json:"pins,omitempty"`
	// Warm is set for a warm run: volumes are copied to green while blue is live, in rounds,
	// before the quiesce (see Warm). Kept here so that a resumed run stays warm.
	Warm *Warm `json:"warm,omitempty"`
}

// Warm says how a warm run pre-copies: at most Rounds rounds, ending early after a round that
// uploaded at most DeltaBytes.
type Warm struct {
	Rounds     int   `json:"rounds"`
	DeltaBytes int64 `json:"deltaBytes"`
}

// Event is one entry of a run's journal.
type Event struct {
	Seq    int             `json:"seq"`
	At     time.Time       `json:"at"`
	State  State           `json:"state"`
	Phase  string          `json:"phase"`
	Step   int             `json:"step,omitempty"` // the traffic step (percent to green) while shifting; the round while staged
	Detail string          `json:"detail,omitempty"`
	Data   json.RawMessage `json:"data,omitempty"`
	// Lease is the generation of the lease the event was written under (the fencing token).
	Lease int64 `json:"lease,omitempty"`
}

// Journal is a run's record in storage: run.json, then events/<seq>.json, each written once.
type Journal struct {
	store storage.Backend
	Run   Run
	// lease, when set, fences every append: it is refused once the run lost its lease.
	lease *Lease

	mu     sync.Mutex
	events []Event
}

// NewID makes a run ID: the time and a few random characters, sortable and unique.
func NewID(now time.Time) string {
	b := make([]byte, 3)
	rand.Read(b)
	return "run-" + now.UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b)
}

func runPrefix(id string) string { return RunsPrefix + id + "/" }

// CreateJournal starts the journal of a new run; an existing run of the same ID is never replaced.
func CreateJournal(ctx context.Context, store storage.Backend, run Run) (*Journal, error) {
	data, err := json.MarshalIndent(run, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := store.Create(ctx, runPrefix(run.ID)+"run.json", bytes.NewReader(data)); err != nil {
		return nil, fmt.Errorf("journal of %s: %w", run.ID, err)
	}
	return &Journal{store: store, Run: run}, nil
}

// OpenJournal reads a run's journal.
func OpenJournal(ctx context.Context, store storage.Backend, id string) (*Journal, error) {
	if id == "" || strings.ContainsAny(id, "/\\") {
		return nil, badinput.Errorf("run ID %q: see ferry migrate list", id)
	}
	j := &Journal{store: store}
	if err := readJSON(ctx, store, runPrefix(id)+"run.json", &j.Run); err != nil {
		if errors.Is(err, storage.ErrNotExist) {
			return nil, badinput.Errorf("no run %q in %s", id, store)
		}
		return nil, err
	}
	var keys []string
	if err := store.List(ctx, runPrefix(id)+"events/", func(o storage.ObjectInfo) error { keys = append(keys, o.Key); return nil }); err != nil {
		return nil, err
	}
	sort.Strings(keys)
	for _, k := range keys {
		var e Event
		if err := readJSON(ctx, store, k, &e); err != nil {
			return nil, fmt.Errorf("journal of %s: %w", id, err)
		}
		j.events = append(j.events, e)
	}
	return j, nil
}

func readJSON(ctx context.Context, store storage.Reader, key string, v any) error {
	rc, err := store.Get(ctx, key)
	if err != nil {
		return err
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	return nil
}

// Append writes the next event; it fails if another process wrote an event of the same number,
// so two processes never both drive a run, and, for a journal held under a lease, once the lease
// was lost: the event carries the lease's generation, renewed just before.
func (j *Journal) Append(ctx context.Context, e Event) (Event, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	e.Seq = len(j.events) + 1
	if j.lease != nil {
		token, err := j.lease.fence(ctx)
		if err != nil {
			return e, fmt.Errorf("run %s: journal: event %d (%s %s) refused: %w", j.Run.ID, e.Seq, e.State, e.Phase, err)
		}
		e.Lease = token
	}
	if e.At.IsZero() {
		e.At = time.Now().UTC()
	}
	data, err := json.MarshalIndent(e, "", "  ")
	if err != nil {
		return e, err
	}
	key := fmt.Sprintf("%sevents/%08d.json", runPrefix(j.Run.ID), e.Seq)
	if err := j.store.Create(ctx, key, bytes.NewReader(data)); err != nil {
		if errors.Is(err, storage.ErrExists) {
			return e, fmt.Errorf("run %s: event %d was written by another process: is the run driven twice?", j.Run.ID, e.Seq)
		}
		return e, fmt.Errorf("run %s: journal: %w", j.Run.ID, err)
	}
	j.events = append(j.events, e)
	return e, nil
}

// Events are the journal's events, in order.
func (j *Journal) Events() []Event {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]Event(nil), j.events...)
}

// Last is the last event of the state and phase (step too, when not zero), if any.
func (j *Journal) Last(state State, phase string, step int) (Event, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for i := len(j.events) - 1; i >= 0; i-- {
		e := j.events[i]
		if e.State == state && e.Phase == phase && (step == 0 || e.Step == step) {
			return e, true
		}
	}
	return Event{}, false
}

// IsDone reports whether a step finished.
func (j *Journal) IsDone(state State, step int) bool {
	_, ok := j.Last(state, Done, step)
	return ok
}

// IsDoneExactly reports whether the step of that number finished: step 0 is a step of its own,
// not any step (a warm run's staged state ends with step 0 after its rounds 1, 2, ...).
func (j *Journal) IsDoneExactly(state State, step int) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, e := range j.events {
		if e.State == state && e.Phase == Done && e.Step == step {
			return true
		}
	}
	return false
}

// Current is the run's state: the last finished step, or RolledBack.
func (j *Journal) Current() State {
	j.mu.Lock()
	defer j.mu.Unlock()
	for i := len(j.events) - 1; i >= 0; i-- {
		if e := j.events[i]; e.Phase == Done {
			return e.State
		}
	}
	return ""
}

// ListRuns lists the IDs of the runs in storage, oldest first.
func ListRuns(ctx context.Context, store storage.Lister) ([]string, error) {
	seen := map[string]bool{}
	var ids []string
	err := store.List(ctx, RunsPrefix, func(o storage.ObjectInfo) error {
		id, _, ok := strings.Cut(strings.TrimPrefix(o.Key, RunsPrefix), "/")
		if ok && !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
		return nil
	})
	return ids, err
}

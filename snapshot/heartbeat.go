package snapshot

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/ferrykube/ferry/internal/ticker"
	"github.com/ferrykube/ferry/storage"
	"k8s.io/utils/clock"
)

// HeartbeatFile is rewritten under backups/<name>/ while a backup runs, so that another run can
// tell a live backup from one whose ferry was killed: only the mover pods of a dead run are safe
// to delete. A complete backup does not keep it.
const HeartbeatFile = "ferry-heartbeat.json"

// HeartbeatInterval is how often a running backup rewrites its heartbeat.
const HeartbeatInterval = 5 * time.Second

// StaleBeats is how many intervals a heartbeat may miss before its run counts as dead.
const StaleBeats = 3

// Heartbeat is the content of HeartbeatFile.
type Heartbeat struct {
	Backup string `json:"backup"`
	// Run is random per run: it names no host or process.
	Run string    `json:"run"`
	At  time.Time `json:"at"`
	// Interval is the writer's, so that readers judge staleness by it, whatever their own is.
	Interval string `json:"interval"`
}

// Beat keeps one backup's heartbeat going.
type Beat struct {
	store    storage.Backend
	name     string
	run      string
	interval time.Duration
	log      *slog.Logger
	beats    *ticker.Loop
}

// StartHeartbeat writes the backup's heartbeat now, then again every interval until Stop is
// called or ctx ends. The first write must succeed; later ones that fail are logged, not fatal:
// the backup's own writes go to the same storage and fail with a better message.
func StartHeartbeat(ctx context.Context, store storage.Backend, name string, interval time.Duration, log *slog.Logger) (*Beat, error) {
	if interval <= 0 {
		interval = HeartbeatInterval
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	id := make([]byte, 8)
	rand.Read(id)
	b := &Beat{store: store, name: name, run: hex.EncodeToString(id), interval: interval, log: log}
	if err := b.write(ctx); err != nil {
		return nil, err
	}
	b.beats = ticker.Start(ctx, clock.RealClock{}, interval, func(ctx context.Context) bool {
		if err := b.write(ctx); err != nil && ctx.Err() == nil {
			b.log.Warn("heartbeat not written", "backup", name, "error", err)
		}
		return true
	})
	return b, nil
}

// Run is this run's id, as the heartbeat records it.
func (b *Beat) Run() string { return b.run }

func (b *Beat) write(ctx context.Context) error {
	data, err := json.Marshal(Heartbeat{Backup: b.name, Run: b.run, At: time.Now().UTC(), Interval: b.interval.String()})
	if err != nil {
		return err
	}
	if err := b.store.Put(ctx, Prefix(b.name)+HeartbeatFile, bytes.NewReader(data)); err != nil {
		return fmt.Errorf("heartbeat of backup %s: %w", b.name, err)
	}
	return nil
}

// Stop ends the heartbeat and removes its file: the backup is complete, or about to be removed.
// No write follows its return.
func (b *Beat) Stop(ctx context.Context) error {
	b.beats.Stop()
	return b.store.Delete(ctx, Prefix(b.name)+HeartbeatFile)
}

// RunState says whether a backup is still being written.
type RunState string

// Run states.
const (
	// RunLive: no manifest yet and a fresh heartbeat.
	RunLive RunState = "live"
	// RunDead: no manifest, and a heartbeat that is stale or gone: its ferry was killed.
	RunDead RunState = "dead"
	// RunComplete: the manifest is written.
	RunComplete RunState = "complete"
	// RunGone: the backup is not in storage (deleted, or failed and removed).
	RunGone RunState = "gone"
)

// RunStatus is what CheckRun found.
type RunStatus struct {
	State RunState
	// LastBeat is when the heartbeat was last stored, by the storage's clock; zero without one.
	LastBeat time.Time
	Run      string
}

// CheckRun tells whether backup name is still being written, at now, by its state (Classify). A
// heartbeat counts as stale when the storage last modified it more than StaleBeats of its
// intervals before now. The manifest is not read.
func CheckRun(ctx context.Context, store storage.Backend, name string, now time.Time) (RunStatus, error) {
	f, err := listFolder(ctx, store, name)
	if err != nil {
		return RunStatus{}, err
	}
	st, err := f.classify(ctx, store, now, false)
	if err != nil {
		return RunStatus{}, err
	}
	rs := RunStatus{LastBeat: st.LastBeat, Run: st.Run}
	switch {
	case st.State == Complete:
		rs = RunStatus{State: RunComplete}
	case st.State == Running:
		rs.State = RunLive
	case f.files[ClaimFile] || f.files[HeartbeatFile]:
		// Every ferry backup starts with its claim file, and its heartbeat right after.
		rs.State = RunDead
	default:
		rs.State = RunGone
	}
	return rs, nil
}

func readHeartbeat(ctx context.Context, store storage.Reader, name string) (Heartbeat, error) {
	var hb Heartbeat
	rc, err := store.Get(ctx, Prefix(name)+HeartbeatFile)
	if err != nil {
		return hb, err
	}
	defer rc.Close()
	// A file that does not decode (foreign, or from a future ferry) is judged by its time alone.
	json.NewDecoder(rc).Decode(&hb)
	return hb, nil
}

// Package progress shows how far long work has come: a bar of bytes with the objects done on a
// terminal, and a plain log line every few seconds when nobody watches one (logs, CI).
package progress

import (
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferrykube/ferry/internal/human"
	"github.com/schollz/progressbar/v3"
	"k8s.io/utils/clock"
)

// Mode is how progress is shown.
type Mode int

// Modes.
const (
	Off   Mode = iota // nothing
	Lines             // a log line every Interval
	Bars              // a bar redrawn in place, for a terminal
)

// ModeFor maps the --progress setting (auto, always or never) to a mode, given whether bars are to
// be drawn (always, or auto on a terminal): log lines stand in for bars unless the user said never.
func ModeFor(setting string, bars bool) Mode {
	switch {
	case bars:
		return Bars
	case setting == "never":
		return Off
	default:
		return Lines
	}
}

// DefaultInterval is the time between two log lines.
const DefaultInterval = 5 * time.Second

// Options configure a Meter.
type Options struct {
	Mode Mode
	// Out receives the bar (stderr).
	Out io.Writer
	// Log receives the lines.
	Log *slog.Logger
	// Task names the work in the bar and in every line, e.g. "backup nightly".
	Task string
	// Objects is how many objects the work is expected to hold (the plan's estimate); 0 if unknown.
	Objects int
	// Interval between log lines; DefaultInterval when zero.
	Interval time.Duration
	// Clock paces the lines; the real clock when nil (tests step a fake one).
	Clock clock.WithTicker
}

// Meter counts bytes and objects as work proceeds and shows them. Its methods are safe for
// concurrent use.
type Meter struct {
	opts    Options
	start   time.Time
	bytes   atomic.Int64
	objects atomic.Int64
	bar     *progressbar.ProgressBar

	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}
}

// Start begins showing progress. Call Stop when the work ends.
func Start(opts Options) *Meter {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	m := &Meter{opts: opts, start: opts.Clock.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	switch opts.Mode {
	case Bars:
		// Stored bytes cannot be known ahead (compression, encryption), so the bar runs without an
		// end and shows the amount, the rate and the elapsed time; objects have the plan's count.
		m.bar = progressbar.NewOptions64(-1,
			progressbar.OptionSetWriter(opts.Out),
			progressbar.OptionSetDescription(m.describe()),
			progressbar.OptionShowBytes(true),
			progressbar.OptionShowCount(),
			progressbar.OptionUseIECUnits(true),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionShowElapsedTimeOnFinish(),
			progressbar.OptionSpinnerType(14),
			progressbar.OptionSetWidth(10),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionSetRenderBlankState(true),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(opts.Out) }),
		)
		close(m.done)
	case Lines:
		go m.logLines()
	default:
		close(m.done)
	}
	return m
}

// AddBytes counts n more bytes written.
func (m *Meter) AddBytes(n int64) {
	m.bytes.Add(n)
	if m.bar != nil {
		m.bar.Add64(n)
	}
}

// AddObjects counts n more objects done.
func (m *Meter) AddObjects(n int) {
	m.objects.Add(int64(n))
	if m.bar != nil {
		m.bar.Describe(m.describe())
	}
}

// Bytes is how many bytes were counted so far.
func (m *Meter) Bytes() int64 { return m.bytes.Load() }

// Objects is how many objects were counted so far.
func (m *Meter) Objects() int { return int(m.objects.Load()) }

// Stop ends the display: the bar is drawn one last time and left on its line, or a last line is
// logged. Calling it again does nothing.
func (m *Meter) Stop() {
	m.stopOnce.Do(func() {
		close(m.stop)
		<-m.done
		switch {
		case m.bar != nil:
			// Ending the bar at its count (not at an end it never had) keeps the figures true;
			// finishing it also prints the log lines still held for it.
			m.bar.ChangeMax64(max(m.bytes.Load(), 1))
			m.bar.Finish()
		case m.opts.Mode == Lines:
			m.logLine("progress done", m.opts.Clock.Since(m.start), m.bytes.Load())
		}
	})
}

// Logger returns a logger for the work while the bar is shown: like the one --log-format makes
// (format text or json), it writes each record above the bar instead of across it. Without a bar
// it returns base.
func (m *Meter) Logger(base *slog.Logger, format string) *slog.Logger {
	if m.bar == nil {
		return base
	}
	out := barWriter{m.bar}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(out, nil))
	}
	return slog.New(slog.NewTextHandler(out, nil))
}

// barWriter holds what is written until the bar is next drawn, then prints it above the bar.
type barWriter struct{ bar *progressbar.ProgressBar }

func (w barWriter) Write(p []byte) (int, error) {
	if _, err := progressbar.Bprintf(w.bar, "%s", p); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (m *Meter) describe() string {
	if m.opts.Objects > 0 {
		return fmt.Sprintf("%s: %d/%d objects", m.opts.Task, m.objects.Load(), m.opts.Objects)
	}
	return fmt.Sprintf("%s: %d objects", m.opts.Task, m.objects.Load())
}

func (m *Meter) logLines() {
	defer close(m.done)
	tick := m.opts.Clock.NewTicker(m.opts.Interval)
	defer tick.Stop()
	last, lastAt := int64(0), m.start
	for {
		select {
		case <-m.stop:
			return
		case <-tick.C():
			now, n := m.opts.Clock.Now(), m.bytes.Load()
			m.logLine("progress", now.Sub(lastAt), n-last)
			last, lastAt = n, now
		}
	}
}

// logLine logs the counts, with the rate of the last `bytes` over `over`.
func (m *Meter) logLine(msg string, over time.Duration, bytes int64) {
	rate := int64(0)
	if over > 0 {
		rate = int64(float64(bytes) / over.Seconds())
	}
	attrs := []any{"task", m.opts.Task, "objects", m.objects.Load()}
	if m.opts.Objects > 0 {
		attrs = append(attrs, "objectsPlanned", m.opts.Objects)
	}
	stored := m.bytes.Load()
	attrs = append(attrs, "bytes", stored, "stored", human.Bytes(stored), "rate", human.Bytes(rate)+"/s",
		"elapsed", m.opts.Clock.Since(m.start).Round(time.Second).String())
	m.opts.Log.Info(msg, attrs...)
}

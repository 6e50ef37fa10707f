package progress

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// lines hands each JSON log record to the test as it is written.
type lines chan map[string]any

func (l lines) Write(p []byte) (int, error) {
	var rec map[string]any
	if err := json.Unmarshal(p, &rec); err != nil {
		return 0, err
	}
	l <- rec
	return len(p), nil
}

func (l lines) next(t *testing.T) map[string]any {
	t.Helper()
	select {
	case rec := <-l:
		return rec
	case <-time.After(10 * time.Second):
		t.Fatal("no log line")
		return nil
	}
}

func (l lines) none(t *testing.T) {
	t.Helper()
	select {
	case rec := <-l:
		t.Fatalf("unexpected log line %v", rec)
	default:
	}
}

func TestLinesEveryInterval(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC))
	out := make(lines, 10)
	m := Start(Options{Mode: Lines, Log: slog.New(slog.NewJSONHandler(out, nil)), Task: "backup b1", Objects: 20, Clock: fc})
	for !fc.HasWaiters() { // the ticker is set up
		time.Sleep(time.Millisecond)
	}

	steps := []struct {
		bytes   int64
		objects int
		want    map[string]any
	}{
		{0, 0, map[string]any{"msg": "progress", "objects": 0.0, "bytes": 0.0, "rate": "0 B/s", "elapsed": "5s"}},
		{10 << 20, 20, map[string]any{"msg": "progress", "objects": 20.0, "objectsPlanned": 20.0, "bytes": float64(10 << 20), "stored": "10.0 MiB", "rate": "2.0 MiB/s", "elapsed": "10s"}},
		// The rate is of the last interval only.
		{5 << 20, 0, map[string]any{"msg": "progress", "objects": 20.0, "bytes": float64(15 << 20), "stored": "15.0 MiB", "rate": "1.0 MiB/s", "elapsed": "15s"}},
	}
	for i, s := range steps {
		m.AddBytes(s.bytes)
		m.AddObjects(s.objects)
		out.none(t) // nothing between ticks
		fc.Step(DefaultInterval)
		rec := out.next(t)
		for k, v := range s.want {
			if rec[k] != v {
				t.Errorf("line %d: %s = %v, want %v (%v)", i, k, rec[k], v, rec)
			}
		}
		if rec["task"] != "backup b1" {
			t.Errorf("line %d names task %v", i, rec["task"])
		}
	}

	fc.Step(2 * time.Second)
	m.Stop()
	rec := out.next(t)
	if rec["msg"] != "progress done" || rec["bytes"] != float64(15<<20) || rec["objects"] != 20.0 || rec["rate"] != "903.5 KiB/s" || rec["elapsed"] != "17s" {
		t.Errorf("last line: %v", rec)
	}
	m.Stop() // again: nothing more
	fc.Step(time.Minute)
	out.none(t)
	if m.Bytes() != 15<<20 || m.Objects() != 20 {
		t.Errorf("counts %d bytes, %d objects", m.Bytes(), m.Objects())
	}
}

func TestModeFor(t *testing.T) {
	for _, tt := range []struct {
		setting string
		bars    bool
		want    Mode
	}{{"auto", true, Bars}, {"auto", false, Lines}, {"always", true, Bars}, {"never", false, Off}} {
		if got := ModeFor(tt.setting, tt.bars); got != tt.want {
			t.Errorf("ModeFor(%q, %v) = %v, want %v", tt.setting, tt.bars, got, tt.want)
		}
	}
}

func TestOffAndBars(t *testing.T) {
	out := make(lines, 1)
	m := Start(Options{Mode: Off, Log: slog.New(slog.NewJSONHandler(out, nil))})
	m.AddBytes(5)
	m.AddObjects(1)
	m.Stop()
	out.none(t)

	var buf bytes.Buffer
	m = Start(Options{Mode: Bars, Out: &buf, Task: "backup b2", Objects: 3})
	log := m.Logger(slog.Default(), "text")
	m.AddBytes(1024)
	log.Info("capturing", "kind", "objects")
	m.AddObjects(3)
	m.AddBytes(1024)
	m.Stop()
	s := buf.String()
	if !strings.Contains(s, "backup b2: 3/3 objects") || !strings.Contains(s, "2.0 KiB") || !strings.HasSuffix(s, "\n") {
		t.Errorf("bar output: %q", s)
	}
	// What a terminal shows of each line: what follows its last carriage return but blanks.
	var shown []string
	for _, line := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
		parts := strings.Split(line, "\r")
		for i := len(parts) - 1; i >= 0; i-- {
			if strings.TrimSpace(parts[i]) != "" {
				shown = append(shown, parts[i])
				break
			}
		}
	}
	if len(shown) != 2 || !strings.Contains(shown[0], "msg=capturing kind=objects") || strings.Contains(shown[0], "backup b2") ||
		!strings.HasPrefix(shown[1], "backup b2: 3/3 objects 100%") {
		t.Errorf("the log line and the bar share a line; the terminal shows %q (%q)", shown, s)
	}
	if m.Logger(slog.Default(), "json") == slog.Default() {
		t.Error("with a bar, Logger kept the logger that writes across it")
	}
	m = Start(Options{Mode: Lines})
	defer m.Stop()
	if m.Logger(slog.Default(), "text") != slog.Default() {
		t.Error("without a bar, Logger changed the logger")
	}
}

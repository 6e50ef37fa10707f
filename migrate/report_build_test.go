package migrate

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/snapshot"
)

// journalOf is a journal of the events, the n-th at t0 + n seconds (unless set).
func journalOf(t0 time.Time, events ...Event) *Journal {
	j := &Journal{Run: Run{ID: "run-1", Backup: "run-1", CreatedAt: t0}}
	for i, e := range events {
		e.Seq = i + 1
		if e.At.IsZero() {
			e.At = t0.Add(time.Duration(i+1) * time.Second)
		}
		j.events = append(j.events, e)
	}
	return j
}

func raw(t *testing.T, v any) json.RawMessage {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestBuildReport: the report of each kind of run, read from its journal alone: times per phase,
// why it stopped (cleared once a later step finished, kept by an automatic rollback), the
// verification, the traffic steps with their gates, when green may first have taken writes, the
// time to a verified cutover, the rollback and the carry-back.
func TestBuildReport(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	verified := Summary{Counts: map[string]map[string]int{"objects": {snapshot.StatusIdentical: 3}}}
	differs := Summary{Counts: map[string]map[string]int{"objects": {"different": 1}},
		Items: []snapshot.ReportItem{{Kind: "objects", Status: "different", Name: "v1 ConfigMap shop/settings", Detail: "data.color"}}}
	upgrade := map[string]any{"upgrade": plans.Upgrade{Moves: []plans.SideItem{{Namespace: "pipelines", Objects: 3}}}}
	carried := carryRecord{Objects: ObjectChanges{Created: []string{"v1 ConfigMap shop/orders"}}, Summary: verified}
	rollback := map[string]any{"why": "by hand, green's writes carried back", "seconds": 2.5}

	t.Run("shifted", func(t *testing.T) {
		rep := BuildReport(journalOf(t0,
			Event{State: Planned, Phase: Begin}, Event{State: Planned, Phase: Done, Data: raw(t, upgrade)},
			Event{State: Verified, Phase: Begin}, Event{State: Verified, Phase: Failed, Detail: "green differs", Data: raw(t, differs)},
			Event{State: Verified, Phase: Begin}, Event{State: Verified, Phase: Done, Data: raw(t, verified)},
			Event{State: Shifting, Phase: Note, Detail: NoteGreenWrites},
			Event{State: Shifting, Phase: Note, Detail: NoteGreenWrites},
			Event{State: Shifting, Phase: Begin, Step: 50}, Event{State: Shifting, Phase: Paused, Step: 50, Detail: "inconclusive", Data: raw(t, map[string]any{"inconclusive": true})},
			Event{State: Shifting, Phase: Begin, Step: 50}, Event{State: Shifting, Phase: Done, Step: 50},
			Event{State: Shifted, Phase: Begin}, Event{State: Shifted, Phase: Done},
		))
		if rep.State != Shifted || rep.Problem != "" {
			t.Errorf("state %q, problem %q; want shifted and no problem once later steps finished", rep.State, rep.Problem)
		}
		if len(rep.Phases) != 6 || rep.Phases[1].Result != Failed || rep.Phases[1].Seconds != 1 || rep.Phases[1].Detail != "green differs" {
			t.Errorf("phases %+v", rep.Phases)
		}
		if rep.Upgrade == nil || len(rep.Upgrade.Moves) != 1 {
			t.Errorf("upgrade %+v, want the plan's upgrade section", rep.Upgrade)
		}
		if rep.Verification == nil || rep.Verification.Counts["objects"][snapshot.StatusIdentical] != 3 || len(rep.Verification.Items) != 0 {
			t.Errorf("verification %+v, want the last one", rep.Verification)
		}
		if len(rep.TrafficSteps) != 2 || rep.TrafficSteps[0].Result != Paused || rep.TrafficSteps[1].Result != Done || rep.TrafficSteps[0].Gates == nil {
			t.Errorf("traffic steps %+v, want 50 %% paused with its gates, then done", rep.TrafficSteps)
		}
		if !rep.GreenMayTakeWritesAt.Equal(t0.Add(7 * time.Second)) {
			t.Errorf("green may take writes at %s, want the first note's time", rep.GreenMayTakeWritesAt)
		}
		if rep.VerifiedCutoverSeconds != 14 {
			t.Errorf("verified cutover %v s, want 14", rep.VerifiedCutoverSeconds)
		}
		var out strings.Builder
		if err := rep.Print(&out); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"Run run-1: shifted", "verified  ", "failed  1s", "shifting  50 %  paused", "Verification: objects identical 3",
			"Green may have taken writes since", "Time to a verified cutover: 14s."} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("printed report lacks %q:\n%s", want, out.String())
			}
		}
		if strings.Contains(out.String(), "Stopped:") {
			t.Errorf("a shifted run's report says it stopped:\n%s", out.String())
		}
	})

	t.Run("restore failed", func(t *testing.T) {
		rep := BuildReport(journalOf(t0, Event{State: Restored, Phase: Begin}, Event{State: Restored, Phase: Failed, Detail: "1 items failed", Data: raw(t, differs)}))
		if rep.Verification == nil || len(rep.Verification.Items) != 1 || rep.Problem != "1 items failed" {
			t.Errorf("verification %+v, problem %q; want the restore's failures", rep.Verification, rep.Problem)
		}
	})

	t.Run("interrupted", func(t *testing.T) {
		rep := BuildReport(journalOf(t0, Event{State: Planned, Phase: Begin}, Event{State: Planned, Phase: Done}, Event{State: Preflighted, Phase: Begin}))
		if rep.State != Planned || len(rep.Phases) != 2 || rep.Phases[1].State != Preflighted || rep.Phases[1].Result != "interrupted" {
			t.Errorf("state %q, phases %+v; want preflighted interrupted", rep.State, rep.Phases)
		}
	})

	t.Run("automatic rollback", func(t *testing.T) {
		rep := BuildReport(journalOf(t0,
			Event{State: Shifting, Phase: Begin, Step: 10}, Event{State: Shifting, Phase: Failed, Step: 10, Detail: "gate failed at 10 %"},
			Event{State: RolledBack, Phase: Begin}, Event{State: RolledBack, Phase: Done, Data: raw(t, map[string]any{"why": "automatic: gate failed", "seconds": 0.5})},
		))
		if rep.State != RolledBack || rep.Problem != "gate failed at 10 %" || rep.Rollback == nil || rep.Rollback.Seconds != 0.5 || rep.CarryBack != nil {
			t.Errorf("state %q, problem %q, rollback %+v, carry-back %+v; want the gate's failure kept", rep.State, rep.Problem, rep.Rollback, rep.CarryBack)
		}
	})

	t.Run("carried back", func(t *testing.T) {
		rep := BuildReport(journalOf(t0,
			Event{State: Shifted, Phase: Begin}, Event{State: Shifted, Phase: Done}, // 1, 2
			Event{State: Shifted, Phase: Note, Detail: NoteCarryBack + " by ops"},               // 3
			Event{State: GreenQuiesced, Phase: Begin}, Event{State: GreenQuiesced, Phase: Done}, // 4, 5
			Event{State: GreenBackedUp, Phase: Begin}, Event{State: GreenBackedUp, Phase: Done}, // 6, 7
			Event{State: CarriedBack, Phase: Begin}, Event{State: CarriedBack, Phase: Done, Data: raw(t, carried)}, // 8, 9
			Event{State: BlueVerified, Phase: Begin}, Event{State: BlueVerified, Phase: Done, Data: raw(t, verified)}, // 10, 11
			Event{State: RolledBack, Phase: Begin}, Event{State: RolledBack, Phase: Done, Data: raw(t, rollback)}, // 12, 13
		))
		cb := rep.CarryBack
		if cb == nil || cb.By != "ops" || cb.Backup != "run-1-carry-back" || !cb.RequestedAt.Equal(t0.Add(3*time.Second)) {
			t.Fatalf("carry-back %+v", cb)
		}
		if cb.Seconds != 7 || cb.ToBlueSeconds != 10 {
			t.Errorf("carry-back took %v s, blue served again after %v s; want 7 and 10", cb.Seconds, cb.ToBlueSeconds)
		}
		if cb.Objects == nil || len(cb.Objects.Created) != 1 || cb.Moved == nil || cb.Verification == nil {
			t.Errorf("carry-back objects %+v, moved %+v, verification %+v", cb.Objects, cb.Moved, cb.Verification)
		}
		if rep.Rollback == nil || rep.Rollback.Why != "by hand, green's writes carried back" {
			t.Errorf("rollback %+v", rep.Rollback)
		}
		var out strings.Builder
		if err := rep.Print(&out); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"Carry-back to blue (backup run-1-carry-back)", "by ops, carried back and verified in 7s:",
			"objects created on green: 1 (v1 ConfigMap shop/orders)", "objects changed on green: 0", "blue verified: objects identical 3",
			"blue served all traffic again 10s after the rollback was asked for", "Rolled back in 2.5s: by hand, green's writes carried back."} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("printed report lacks %q:\n%s", want, out.String())
			}
		}
	})

	t.Run("carried back with objects awaiting blue's writers", func(t *testing.T) {
		const tune = "kubeflow.org/v1beta1 Experiment team/tune"
		awaiting := carried
		awaiting.Awaiting = []string{tune}
		missing := Summary{Counts: map[string]map[string]int{"objects": {snapshot.StatusIdentical: 3, snapshot.StatusMissing: 1}},
			Items: []snapshot.ReportItem{{Kind: "objects", Status: snapshot.StatusMissing, Name: tune, Detail: "not on the target"}}}
		for _, tc := range []struct {
			name   string
			events []Event
			want   string
		}{
			{"before blue's writers start", nil, "made once they start"},
			{"once they started", []Event{{State: RolledBack, Phase: Begin}, {State: RolledBack, Phase: Note, Detail: NoteAwaitingMade},
				{State: RolledBack, Phase: Done, Data: raw(t, rollback)}}, "made and verified once they started"},
			{"green's writes discarded", []Event{{State: RolledBack, Phase: Begin}, {State: RolledBack, Phase: Done, Data: raw(t, rollback)}},
				"never made: the run went back without them"},
		} {
			rep := BuildReport(journalOf(t0, append([]Event{
				{State: Shifted, Phase: Begin}, {State: Shifted, Phase: Done},
				{State: Shifted, Phase: Note, Detail: NoteCarryBack + " by ops"},
				{State: CarriedBack, Phase: Begin}, {State: CarriedBack, Phase: Done, Data: raw(t, awaiting)},
				{State: BlueVerified, Phase: Begin}, {State: BlueVerified, Phase: Done, Data: raw(t, missing)},
			}, tc.events...)...))
			var out strings.Builder
			if err := rep.Print(&out); err != nil {
				t.Fatal(err)
			}
			if want := "awaiting blue's writers, one of which may serve their admission webhook: 1 (" + tune + "), " + tc.want; !strings.Contains(out.String(), want) {
				t.Errorf("%s: printed report lacks %q:\n%s", tc.name, want, out.String())
			}
			if strings.Contains(out.String(), "objects missing "+tune) {
				t.Errorf("%s: the object awaiting blue's writers is listed as missing:\n%s", tc.name, out.String())
			}
		}
	})
}

// TestReportLacking: what a run's backups skipped, allowed, is what the cluster serving its
// outcome lacks: green after the run, nothing after a plain rollback (blue kept all it had),
// blue after a carry-back whose backup of green skipped items. The report lists them.
func TestReportLacking(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	onBlue := []snapshot.Skipped{{Kind: "volume", Name: "alice/workspace", Reason: "the claim is pending"}}
	onGreen := []snapshot.Skipped{{Kind: "database", Name: "kfp-mysql", Reason: "not found on the source"}}
	run := []Event{
		{State: BackedUp, Phase: Begin}, {State: BackedUp, Phase: Done, Data: raw(t, onBlue)},
		{State: Shifted, Phase: Begin}, {State: Shifted, Phase: Done},
	}
	rolledBack := []Event{{State: RolledBack, Phase: Begin}, {State: RolledBack, Phase: Done, Data: raw(t, map[string]any{"why": "by hand"})}}
	carried := []Event{
		{State: Shifted, Phase: Note, Detail: NoteCarryBack + " by ops"},
		{State: GreenBackedUp, Phase: Begin}, {State: GreenBackedUp, Phase: Done, Data: raw(t, onGreen)},
	}
	for _, tc := range []struct {
		name   string
		events []Event
		where  string
		want   []snapshot.Skipped
		lists  string
	}{
		{"nothing skipped", []Event{{State: BackedUp, Phase: Done, Data: raw(t, []snapshot.Skipped{})}}, "green", nil, ""},
		{"a journal of before the list", []Event{{State: BackedUp, Phase: Done, Data: json.RawMessage("null")}}, "green", nil, ""},
		{"shifted", run, "green", onBlue, "Skipped by the backup, which green lacks (--allow-skipped went on without them):\n  volume alice/workspace: the claim is pending\n"},
		{"rolled back", append(slices.Clone(run), rolledBack...), "blue", nil, ""},
		{"carried back", append(append(slices.Clone(run), carried...), rolledBack...), "blue", onGreen,
			"  skipped by the backup of green, which blue lacks (--allow-skipped went on without them):\n    database kfp-mysql: not found on the source\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := BuildReport(journalOf(t0, tc.events...))
			where, got := rep.Lacking()
			if where != tc.where || len(got)+len(tc.want) > 0 && !reflect.DeepEqual(got, tc.want) {
				t.Errorf("lacking %s %+v, want %s %+v", where, got, tc.where, tc.want)
			}
			var out strings.Builder
			if err := rep.Print(&out); err != nil {
				t.Fatal(err)
			}
			if tc.lists != "" && !strings.Contains(out.String(), tc.lists) {
				t.Errorf("the report does not list them as %q:\n%s", tc.lists, out.String())
			}
		})
	}
}

// TestReportNotes: the journal's notes for the operator are in the report, said for people; the
// run's own bookkeeping is not.
func TestReportNotes(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	rep := BuildReport(journalOf(t0,
		Event{State: Shifting, Phase: Note, Detail: NoteTrafficSaved, Data: json.RawMessage(`"weights"`)},
		Event{State: Shifting, Phase: Note, Detail: NoteGreenWrites},
		Event{State: Shifting, Phase: Note, Detail: NoteTrafficReturned, Data: raw(t, map[string]string{"why": "gate http failed at 50 %"})},
		Event{State: Shifting, Phase: Note, Detail: "flipped by hand: blue 50% / green 50%"},
		Event{State: Shifting, Phase: Note, Detail: NoteGreenRanLate, Data: raw(t, map[string]string{"writers": "Deployment kubeflow/ml-pipeline"})},
	))
	var got []string
	for _, n := range rep.Notes {
		got = append(got, n.Note)
	}
	want := []string{"traffic returned to blue's saved state: gate http failed at 50 %", "flipped by hand: blue 50% / green 50%",
		"green's writers ran after its backup for the carry-back: Deployment kubeflow/ml-pipeline"}
	if !slices.Equal(got, want) {
		t.Fatalf("notes %q, want %q", got, want)
	}
	var out strings.Builder
	if err := rep.Print(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "\nNoted:\n") || !strings.Contains(out.String(), "traffic returned to blue's saved state: gate http failed at 50 %\n") {
		t.Errorf("the report does not show the notes:\n%s", out.String())
	}
}

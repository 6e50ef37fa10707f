package migrate

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ferrykube/ferry/internal/human"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/storage"
)

// Report is what a run did, read from its journal: time per phase, time to a verified cutover,
// the verification, each traffic step with its gate measurements, the rollback if any.
type Report struct {
	Run       string        `json:"run"`
	State     State         `json:"state"`
	Blue      plans.Cluster `json:"blue"`
	Green     plans.Cluster `json:"green"`
	Backup    string        `json:"backup"`
	StartedAt time.Time     `json:"startedAt"`
	Phases    []Phase       `json:"phases"`
	// VerifiedCutoverSeconds is from the run's start to green serving all traffic, verified.
	VerifiedCutoverSeconds float64 `json:"verifiedCutoverSeconds,omitempty"`
	// DowntimeSeconds is from the start of blue's quiesce to green serving all traffic (the end
	// of the shift): the time writes were stopped. Set once the run shifted.
	DowntimeSeconds float64 `json:"downtimeSeconds,omitempty"`
	// Warm is a warm run's pre-copy settings, and Rounds its rounds, each with its delta.
	Warm   *Warm   `json:"warm,omitempty"`
	Rounds []Round `json:"rounds,omitempty"`
	// RestoreSentBytes are the bytes of volume contents the run's restore sent to green (of a
	// warm run, only what changed since its last round); nil before the restore is done.
	RestoreSentBytes *int64   `json:"restoreSentBytes,omitempty"`
	Verification     *Summary `json:"verification,omitempty"`
	// Awaiting are the objects the restore left awaiting green's writers, one of which may serve
	// their admission webhook; AwaitingMade says they were made and verified once those started.
	Awaiting             []string          `json:"awaiting,omitempty"`
	AwaitingMade         bool              `json:"awaitingMade,omitempty"`
	TrafficSteps         []TrafficStep     `json:"trafficSteps,omitempty"`
	GreenMayTakeWritesAt time.Time         `json:"greenMayTakeWritesAt,omitzero"`
	Rollback             *RollbackSummary  `json:"rollback,omitempty"`
	CarryBack            *CarryBackSummary `json:"carryBack,omitempty"`
	// Notes are what the journal noted for the operator beside the steps: traffic a failed gate
	// returned to blue, flips by hand, a rollback's choices, green's writers running late.
	Notes []ReportNote `json:"notes,omitempty"`
	// Skipped are the items the run's backup skipped, allowed (--allow-skipped): green lacks them.
	Skipped []snapshot.Skipped `json:"skipped,omitempty"`
	// Problem is why the run stopped, when it did.
	Problem string `json:"problem,omitempty"`
	// Protection says what of the run's journal and backups is encrypted (see ReadReport).
	Protection []StoredProtection `json:"protection,omitempty"`
	// Upgrade is, for an upgrade, what moved as state, what was left to green's release and
	// behind on blue, the versions custom resources moved in, and how the releases differ.
	Upgrade *plans.Upgrade `json:"upgrade,omitempty"`
	// Schemas are, for an upgrade, how each database's schema after it (green's, as its release
	// migrated it) differs from before it (blue's, in the run's backup), from the latest reading:
	// at the shift, at finalize, or in the carry-back's backup of green.
	Schemas []snapshot.SchemaChange `json:"schemas,omitempty"`
	// SchemasUnread says why green's schemas could not be read.
	SchemasUnread string `json:"schemasUnread,omitempty"`
}

// ReportNote is a note of the journal, said for people.
type ReportNote struct {
	At   time.Time `json:"at"`
	Note string    `json:"note"`
}

// reportNote says note e for people, or "" for one that is the run's own bookkeeping (or is in
// the report otherwise: when green may take writes, the carry-back).
func reportNote(e Event) string {
	var data map[string]string
	json.Unmarshal(e.Data, &data)
	switch {
	case e.Detail == NoteTrafficReturned:
		return "traffic returned to blue's saved state: " + cmp.Or(data["why"], "a gate failed")
	case e.Detail == NoteGreenRanLate:
		return "green's writers ran after its backup for the carry-back: " + cmp.Or(data["writers"], "(not named)")
	case e.Detail == NoteBlueStarting:
		return "blue's writers starting"
	case strings.HasPrefix(e.Detail, NoteWritesDiscarded), strings.HasPrefix(e.Detail, "flipped by hand"),
		strings.HasPrefix(e.Detail, "no traffic switcher"):
		return e.Detail
	}
	return ""
}

// StoredProtection is what of one stored record of a run is encrypted.
type StoredProtection struct {
	What string `json:"what"` // "journal", "backup NAME"
	snapshot.Protection
	// Unknown says why a backup's protection is not known: it is not complete (yet).
	Unknown string `json:"unknown,omitempty"`
}

// journalProtection is the journal's: never encrypted, so it holds names, times and counts only.
func journalProtection() snapshot.Protection {
	return snapshot.Protection{Encrypted: []string{}, Plaintext: []string{
		"the run's configuration (secret values in it are references: valueFrom)",
		"clusters' contexts and servers, each step's times, results and counts",
		"names of objects, claims, files, databases and buckets in verification differences (Secrets' differences by key and length only)",
	}}
}

// ReadReport is the run's report (BuildReport) with what of its journal and backups is encrypted.
func ReadReport(ctx context.Context, j *Journal) Report {
	rep := BuildReport(j)
	manifests := rep.readManifests(ctx, j.store)
	rep.addProtection(manifests)
	rep.addCarriedSchemas(manifests)
	return rep
}

// backups are the run's backups: its own, and the carry-back's.
func (rep *Report) backups() []string {
	if rep.CarryBack != nil {
		return []string{rep.Backup, rep.CarryBack.Backup}
	}
	return []string{rep.Backup}
}

// readManifests reads the manifest of each of the run's backups that is complete, by name.
func (rep *Report) readManifests(ctx context.Context, store storage.Reader) map[string]*snapshot.Manifest {
	out := map[string]*snapshot.Manifest{}
	for _, name := range rep.backups() {
		if m, err := snapshot.ReadManifest(ctx, store, name); err == nil {
			out[name] = m
		}
	}
	return out
}

// addProtection adds what of the run's journal and each of its backups (the run's, and the
// carry-back's) is encrypted, from the backups' manifests.
func (rep *Report) addProtection(manifests map[string]*snapshot.Manifest) {
	rep.Protection = []StoredProtection{{What: "journal", Protection: journalProtection()}}
	for _, name := range rep.backups() {
		p := StoredProtection{What: "backup " + name}
		if m := manifests[name]; m == nil {
			p.Unknown = "no complete backup to read it from"
		} else {
			p.Protection = snapshot.ProtectionOf(m.Encryption)
		}
		rep.Protection = append(rep.Protection, p)
	}
}

// Phase is one step of the run.
type Phase struct {
	State   State     `json:"state"`
	Step    int       `json:"step,omitempty"`
	Began   time.Time `json:"began"`
	Seconds float64   `json:"seconds"`
	Result  string    `json:"result"` // done, failed, paused, running
	Detail  string    `json:"detail,omitempty"`
}

// TrafficStep is one step of the shift with what the gates measured.
type TrafficStep struct {
	Percent int             `json:"percent"`
	Result  string          `json:"result"`
	Seconds float64         `json:"seconds"`
	Gates   json.RawMessage `json:"gates,omitempty"`
}

// RollbackSummary says why and how fast traffic went back to blue.
type RollbackSummary struct {
	Why     string  `json:"why"`
	Seconds float64 `json:"seconds"`
}

// CarryBackSummary is what a carry-back moved from green to blue, how long it took and what the
// verification of blue found.
type CarryBackSummary struct {
	// Backup is the backup of green that was restored onto blue.
	Backup string `json:"backup"`
	// RequestedAt is when ferry rollback --carry-back was first run, and By who ran it.
	RequestedAt time.Time `json:"requestedAt"`
	By          string    `json:"by,omitempty"`
	// Objects names the objects created, changed and deleted on green since the restore, which
	// the carry-back created, updated and deleted on blue.
	Objects *ObjectChanges `json:"objects,omitempty"`
	// Moved is the restore onto blue: counts by kind and status, and the items it listed.
	Moved *Summary `json:"moved,omitempty"`
	// Verification is blue verified against the backup of green.
	Verification *Summary `json:"verification,omitempty"`
	// Seconds is from green's quiesce to blue verified; ToBlueSeconds from the request to blue
	// serving all traffic again with its writers running.
	Seconds       float64 `json:"seconds,omitempty"`
	ToBlueSeconds float64 `json:"toBlueSeconds,omitempty"`
	// Awaiting are the objects whose admission webhook's server could not be called while blue's
	// writers were stopped; AwaitingMade says they were made and verified once those started.
	Awaiting     []string `json:"awaiting,omitempty"`
	AwaitingMade bool     `json:"awaitingMade,omitempty"`
	// Skipped are the items the backup of green skipped, allowed (--allow-skipped): blue lacks them.
	Skipped []snapshot.Skipped `json:"skipped,omitempty"`

	started time.Time
}

// ObjectChanges name objects ("v1 ConfigMap ns/name") by what happened to them on green.
type ObjectChanges struct {
	Created []string `json:"created,omitempty"`
	Changed []string `json:"changed,omitempty"`
	Deleted []string `json:"deleted,omitempty"`
}

// BuildReport reads a run's report from its journal.
func BuildReport(j *Journal) Report {
	rep := Report{Run: j.Run.ID, State: j.Current(), Blue: j.Run.Blue, Green: j.Run.Green, Backup: j.Run.Backup, StartedAt: j.Run.CreatedAt, Warm: j.Run.Warm}
	var quiesceBegan time.Time
	open := map[[2]any]Event{}
	for _, e := range j.Events() {
		key := [2]any{e.State, e.Step}
		switch e.Phase {
		case Begin:
			open[key] = e
			if e.State == Quiesced && quiesceBegan.IsZero() {
				quiesceBegan = e.At
			}
			if cb := rep.CarryBack; cb != nil && e.State == GreenQuiesced && cb.started.IsZero() {
				cb.started = e.At
			}
		case Done, Failed, Paused:
			b, ok := open[key]
			if !ok {
				b = e
			}
			delete(open, key)
			p := Phase{State: e.State, Step: e.Step, Began: b.At, Seconds: e.At.Sub(b.At).Seconds(), Result: e.Phase, Detail: e.Detail}
			rep.Phases = append(rep.Phases, p)
			if e.Phase != Done {
				rep.Problem = e.Detail
			} else if e.State != RolledBack {
				rep.Problem = ""
			}
			switch {
			case e.State == Planned && e.Phase == Done:
				var p struct { // of the journaled plan, only its upgrade section
					Upgrade *plans.Upgrade `json:"upgrade"`
				}
				if json.Unmarshal(e.Data, &p) == nil {
					rep.Upgrade = p.Upgrade
				}
			case e.State == Verified || (e.State == Restored && e.Phase == Failed):
				var s Summary
				if json.Unmarshal(e.Data, &s) == nil && s.Counts != nil {
					rep.Verification = &s
				}
			case e.State == Shifting && e.Step > 0:
				rep.TrafficSteps = append(rep.TrafficSteps, TrafficStep{Percent: e.Step, Result: e.Phase, Seconds: p.Seconds, Gates: e.Data})
			case e.State == Restored && e.Phase == Done:
				var s Summary
				if json.Unmarshal(e.Data, &s) == nil {
					sent := s.Sent["volumes"]
					rep.RestoreSentBytes = &sent
					rep.Awaiting = s.Awaiting
				}

			case e.State == BackedUp && e.Phase == Done:
				rep.Skipped = nil
				json.Unmarshal(e.Data, &rep.Skipped)
			case e.State == Staged && e.Step > 0 && e.Phase == Done:
				var rd Round
				if json.Unmarshal(e.Data, &rd) == nil {
					rep.Rounds = append(rep.Rounds, rd)
				}
			case e.State == Shifted && e.Phase == Done:
				rep.VerifiedCutoverSeconds = e.At.Sub(j.Run.CreatedAt).Seconds()
				if !quiesceBegan.IsZero() {
					rep.DowntimeSeconds = e.At.Sub(quiesceBegan).Seconds()
				}
				rep.addSchemas(e.Data)
			case e.State == Finalized && e.Phase == Done:
				rep.addSchemas(e.Data)
			case e.State == RolledBack && e.Phase == Done:
				var d struct {
					Why     string  `json:"why"`
					Seconds float64 `json:"seconds"`
				}
				json.Unmarshal(e.Data, &d)
				rep.Rollback = &RollbackSummary{Why: d.Why, Seconds: d.Seconds}
				if cb := rep.CarryBack; cb != nil {
					cb.ToBlueSeconds = e.At.Sub(cb.RequestedAt).Seconds()
				}
			}
			if cb := rep.CarryBack; cb != nil && e.Phase == Done {
				cb.add(e)
			}
		case Note:
			if note := reportNote(e); note != "" {
				rep.Notes = append(rep.Notes, ReportNote{At: e.At, Note: note})
			}
			switch {
			case e.Detail == NoteGreenWrites && rep.GreenMayTakeWritesAt.IsZero():
				rep.GreenMayTakeWritesAt = e.At
			case strings.HasPrefix(e.Detail, NoteCarryBack) && rep.CarryBack == nil:
				rep.CarryBack = &CarryBackSummary{Backup: CarryBackName(j.Run.ID), RequestedAt: e.At,
					By: strings.TrimPrefix(strings.TrimPrefix(e.Detail, NoteCarryBack), " by ")}
			case e.Detail == NoteAwaitingMade && e.State == Shifting:
				rep.AwaitingMade = true
			case e.Detail == NoteAwaitingMade && e.State == RolledBack && rep.CarryBack != nil:
				rep.CarryBack.AwaitingMade = true
			}
		}
	}
	for _, b := range open {
		rep.Phases = append(rep.Phases, Phase{State: b.State, Step: b.Step, Began: b.At, Seconds: time.Since(b.At).Seconds(), Result: "interrupted"})
	}
	return rep
}

// addSchemas takes in a reading of green's database schemas (schemaRecord) that a step journaled.
func (rep *Report) addSchemas(data json.RawMessage) {
	var rec schemaRecord
	if json.Unmarshal(data, &rec) == nil && (rec.Schemas != nil || rec.Unread != "") {
		rep.Schemas, rep.SchemasUnread = rec.Schemas, rec.Unread
	}
}

// addCarriedSchemas compares, for an upgrade carried back, the schemas of the run's backup of
// blue with those of the carry-back's backup of green: the latest reading of green's.
func (rep *Report) addCarriedSchemas(manifests map[string]*snapshot.Manifest) {
	if rep.Upgrade == nil || rep.CarryBack == nil {
		return
	}
	before, after := manifests[rep.Backup], manifests[rep.CarryBack.Backup]
	if before == nil || after == nil {
		return // not made (yet): the earlier reading stands
	}
	var changes []snapshot.SchemaChange
	for _, d := range before.Databases {
		i := slices.IndexFunc(after.Databases, func(g snapshot.Database) bool { return g.Name == d.Name })
		if len(d.Schemas) == 0 || i < 0 {
			continue
		}
		c := snapshot.CompareSchemas(d.Tables, after.Databases[i].Tables)
		c.Database, c.Engine, c.After, c.ReadAt = d.Name, d.Engine, "green in the carry-back's backup "+after.Name, after.CompletedAt
		changes = append(changes, c)
	}
	rep.Schemas, rep.SchemasUnread = changes, ""
}

// add takes in a finished step of the carry-back.
func (cb *CarryBackSummary) add(e Event) {
	switch e.State {
	case GreenBackedUp:
		cb.Skipped = nil
		json.Unmarshal(e.Data, &cb.Skipped)
	case CarriedBack:
		var rec carryRecord
		if json.Unmarshal(e.Data, &rec) == nil {
			cb.Objects, cb.Moved, cb.Awaiting = &rec.Objects, &rec.Summary, rec.Awaiting
		}
	case BlueVerified:
		var s Summary
		if json.Unmarshal(e.Data, &s) == nil {
			cb.Verification = &s
		}
		if !cb.started.IsZero() {
			cb.Seconds = e.At.Sub(cb.started).Seconds()
		}
	}
}

// Print writes the report for people.
func (rep Report) Print(w io.Writer) error {
	fmt.Fprintf(w, "Run %s: %s\n", rep.Run, rep.State)
	fmt.Fprintf(w, "  blue  %s (%s)\n  green %s (%s)\n  backup %s\n\n", orDash(rep.Blue.Context), rep.Blue.Server, orDash(rep.Green.Context), rep.Green.Server, rep.Backup)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PHASE\tSTEP\tRESULT\tTIME\tDETAIL")
	for _, p := range rep.Phases {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.State, stepLabel(p.State, p.Step), p.Result, seconds(p.Seconds), oneLine(p.Detail))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(rep.Rounds) > 0 && rep.Warm != nil {
		fmt.Fprintf(w, "\nPre-copy rounds (blue live; at most %d, ending at a delta of at most %s):\n", rep.Warm.Rounds, human.Bytes(rep.Warm.DeltaBytes))
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  ROUND\tBACKUP\tVOLUMES\tFILES\tBYTES\tREAD\tBUCKET OBJECTS (READ)\tDELTA (UPLOADED)\tSENT TO GREEN\tBACKUP TIME\tRESTORE TIME")
		for _, rd := range rep.Rounds {
			fmt.Fprintf(tw, "  %d\t%s\t%d\t%d\t%s\t%d files, %s\t%d, %s (%s)\t%s\t%s\t%s\t%s\n", rd.Round, rd.Backup, rd.Volumes, rd.Files, human.Bytes(rd.Bytes),
				rd.ReadFiles, human.Bytes(rd.ReadBytes), rd.BucketObjects, human.Bytes(rd.BucketBytes), human.Bytes(rd.BucketReadBytes),
				human.Bytes(rd.Delta()), human.Bytes(rd.SentBytes), seconds(rd.BackupSeconds), seconds(rd.RestoreSeconds))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if rep.RestoreSentBytes != nil {
			fmt.Fprintf(w, "  The restore after the quiesce sent %s of the claims' contents to green.\n", human.Bytes(*rep.RestoreSentBytes))
		}
	}
	if v := rep.Verification; v != nil {
		fmt.Fprintf(w, "\nVerification: %s\n", countsLine(v.Counts))
		printItems(w, "  ", v.Items, rep.Awaiting)
		printAwaiting(w, "  ", "green", rep.Awaiting, rep.AwaitingMade, rep.Rollback != nil)
	}
	printSkipped(w, "\n", "Skipped by the backup, which green lacks (--allow-skipped went on without them):", rep.Skipped)
	if u := rep.Upgrade; u != nil {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		u.Write(tw, cmp.Or(rep.Blue.Context, "blue"), cmp.Or(rep.Green.Context, "green"))
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	printSchemas(w, rep.Schemas, rep.SchemasUnread)
	if !rep.GreenMayTakeWritesAt.IsZero() {
		fmt.Fprintf(w, "Green may have taken writes since %s.\n", rep.GreenMayTakeWritesAt.Local().Format(time.RFC3339))
	}
	if rep.VerifiedCutoverSeconds > 0 {
		fmt.Fprintf(w, "Time to a verified cutover: %s.\n", seconds(rep.VerifiedCutoverSeconds))
	}
	if rep.DowntimeSeconds > 0 {
		fmt.Fprintf(w, "Downtime: %s (quiesce to green serving); total %s\n", seconds(rep.DowntimeSeconds), seconds(rep.VerifiedCutoverSeconds))
	}
	if len(rep.Notes) > 0 {
		fmt.Fprintln(w, "\nNoted:")
		for _, n := range rep.Notes {
			fmt.Fprintf(w, "  %s  %s\n", n.At.Local().Format(time.RFC3339), oneLine(n.Note))
		}
	}
	if cb := rep.CarryBack; cb != nil {
		cb.print(w)
	}
	if rb := rep.Rollback; rb != nil {
		fmt.Fprintf(w, "Rolled back in %s: %s.\n", seconds(rb.Seconds), rb.Why)
	}
	if rep.Problem != "" {
		fmt.Fprintf(w, "Stopped: %s\n", rep.Problem)
	}
	if len(rep.Protection) > 0 {
		fmt.Fprintln(w, "\nStored:")
		for _, p := range rep.Protection {
			p.print(w)
		}
	}
	return nil
}

// Lacking are the items a backup skipped that the cluster serving the run's outcome lacks, and
// that cluster: green's, of the run's backup; once rolled back, blue's, of the carry-back's
// backup of green (none without a carry-back: blue kept all it had).
func (rep Report) Lacking() (string, []snapshot.Skipped) {
	switch {
	case rep.Rollback == nil:
		return "green", rep.Skipped
	case rep.CarryBack != nil:
		return "blue", rep.CarryBack.Skipped
	}
	return "blue", nil
}

// printSkipped writes the heading and each skipped item below it, when there are any.
func printSkipped(w io.Writer, indent, heading string, skipped []snapshot.Skipped) {
	if len(skipped) == 0 {
		return
	}
	fmt.Fprintf(w, "%s%s\n", indent, heading)
	indent = strings.TrimLeft(indent, "\n")
	for _, s := range skipped {
		fmt.Fprintf(w, "%s  %s %s: %s\n", indent, s.Kind, s.Name, oneLine(s.Reason))
	}
}

func (p StoredProtection) print(w io.Writer) {
	switch {
	case p.Unknown != "":
		fmt.Fprintf(w, "  %s: encryption not known, %s\n", p.What, p.Unknown)
		return
	case len(p.Encrypted) == 0:
		fmt.Fprintf(w, "  %s: not encrypted\n", p.What)
	default:
		fmt.Fprintf(w, "  %s: encrypted with age to %s: %s\n", p.What, strings.Join(p.Recipients, ", "), strings.Join(p.Encrypted, ", "))
	}
	for _, item := range p.Plaintext {
		fmt.Fprintf(w, "    in plain text: %s\n", item)
	}
}

func (cb *CarryBackSummary) print(w io.Writer) {
	fmt.Fprintf(w, "\nCarry-back to blue (backup %s), requested %s by %s", cb.Backup, cb.RequestedAt.Local().Format(time.RFC3339), orDash(cb.By))
	if cb.Seconds > 0 {
		fmt.Fprintf(w, ", carried back and verified in %s", seconds(cb.Seconds))
	}
	fmt.Fprintln(w, ":")
	if o := cb.Objects; o != nil {
		for _, c := range []struct {
			what string
			ids  []string
		}{{"created", o.Created}, {"changed", o.Changed}, {"deleted", o.Deleted}} {
			fmt.Fprintf(w, "  objects %s on green: %d", c.what, len(c.ids))
			if len(c.ids) > 0 {
				fmt.Fprintf(w, " (%s)", oneLine(strings.Join(c.ids, ", ")))
			}
			fmt.Fprintln(w)
		}
	}
	for _, s := range []struct {
		title string
		sum   *Summary
	}{{"moved to blue", cb.Moved}, {"blue verified", cb.Verification}} {
		if s.sum != nil {
			fmt.Fprintf(w, "  %s: %s\n", s.title, countsLine(s.sum.Counts))
			var awaiting []string
			if s.sum == cb.Verification {
				awaiting = cb.Awaiting
			}
			printItems(w, "    ", s.sum.Items, awaiting)
		}
	}
	printAwaiting(w, "  ", "blue", cb.Awaiting, cb.AwaitingMade, cb.ToBlueSeconds > 0)
	printSkipped(w, "  ", "skipped by the backup of green, which blue lacks (--allow-skipped went on without them):", cb.Skipped)
	if cb.ToBlueSeconds > 0 {
		fmt.Fprintf(w, "  blue served all traffic again %s after the rollback was asked for\n", seconds(cb.ToBlueSeconds))
	}
}

// printItems writes a summary's listed items but the differences of the objects that awaited the
// target's writers, which printAwaiting says were verified once made.
func printItems(w io.Writer, indent string, items []snapshot.ReportItem, awaiting []string) {
	for _, it := range items {
		if it.Kind == "objects" && it.Status != snapshot.StatusAwaiting && slices.Contains(awaiting, it.Name) {
			continue
		}
		fmt.Fprintf(w, "%s%s %s %s: %s\n", indent, it.Kind, it.Status, it.Name, it.Detail)
	}
}

// printAwaiting says which objects a restore left awaiting the writers of where, and whether
// they were made and verified once those started, or never will be (over: the run went on
// without them, rolled back or with green's writes discarded).
func printAwaiting(w io.Writer, indent, where string, awaiting []string, made, over bool) {
	if len(awaiting) == 0 {
		return
	}
	state := "made once they start"
	switch {
	case made:
		state = "made and verified once they started"
	case over:
		state = "never made: the run went back without them"
	}
	fmt.Fprintf(w, "%sawaiting %s's writers, one of which may serve their admission webhook: %d (%s), %s\n", indent, where, len(awaiting), oneLine(strings.Join(awaiting, ", ")), state)
}

func countsLine(counts map[string]map[string]int) string {
	var parts []string
	for _, k := range []string{"objects", "volumes", "databases", "buckets", "health"} {
		for _, status := range slices.Sorted(maps.Keys(counts[k])) {
			parts = append(parts, fmt.Sprintf("%s %s %d", k, status, counts[k][status]))
		}
	}
	return strings.Join(parts, ", ")
}

// stepLabel names a step of a state for people: a warm run's round, or a traffic step's percent.
func stepLabel(state State, step int) string {
	switch {
	case step <= 0:
		return ""
	case state == Staged:
		return fmt.Sprintf("round %d", step)
	default:
		return fmt.Sprintf("%d %%", step)
	}
}

func seconds(s float64) string {
	return (time.Duration(s * float64(time.Second))).Round(time.Millisecond).String()
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 160 {
		s = s[:157] + "..."
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// printSchemas writes how each database's schema changed across the upgrade.
func printSchemas(w io.Writer, changes []snapshot.SchemaChange, unread string) {
	if len(changes) == 0 && unread == "" {
		return
	}
	fmt.Fprintln(w, "\nDATABASE SCHEMAS (before: blue, in the run's backup)")
	if unread != "" {
		fmt.Fprintf(w, "  green's schemas not read: %s\n", unread)
	}
	for _, c := range changes {
		fmt.Fprintf(w, "  %s %s, after: %s", c.Engine, c.Database, c.After)
		if !c.ReadAt.IsZero() {
			fmt.Fprintf(w, " (%s)", c.ReadAt.Local().Format(time.RFC3339))
		}
		switch {
		case c.Unread != "":
			fmt.Fprintf(w, "\n    not read: %s\n", c.Unread)
			continue
		case c.Unchanged():
			fmt.Fprintf(w, "\n    %d tables, unchanged\n", c.TablesBefore)
			continue
		}
		fmt.Fprintf(w, "\n    %d tables before, %d after\n", c.TablesBefore, c.TablesAfter)
		for _, t := range c.Tables {
			verb := "table dropped"
			if t.Added {
				verb = "table added"
			}
			cols := make([]string, len(t.Columns))
			for i, col := range t.Columns {
				cols[i] = col.Name + " " + col.Type
			}
			fmt.Fprintf(w, "    %-14s %s (%s)\n", verb, t.Table, strings.Join(cols, ", "))
		}
		for _, col := range c.Columns {
			switch {
			case col.Column == snapshot.PrimaryKey:
				fmt.Fprintf(w, "    %-14s %s: %s -> %s\n", "key changed", col.Table, col.Before, col.After)
			case col.Before == "":
				fmt.Fprintf(w, "    %-14s %s.%s %s\n", "column added", col.Table, col.Column, col.After)
			case col.After == "":
				fmt.Fprintf(w, "    %-14s %s.%s %s\n", "column dropped", col.Table, col.Column, col.Before)
			default:
				fmt.Fprintf(w, "    %-14s %s.%s %s -> %s\n", "column retyped", col.Table, col.Column, col.Before, col.After)
			}
		}
	}
}

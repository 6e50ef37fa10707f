package snapshot

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/storage"
)

// Policy says which backups to keep, in the spirit of restic's forget: each Keep* rule keeps the
// newest backup of each of the last N buckets of its period (Last: of the last N backups), in
// UTC; a backup kept by any rule is kept. -1 keeps every bucket. Only complete backups count.
type Policy struct {
	Last, Hourly, Daily, Weekly, Monthly, Yearly int
	// Grace is how long an incomplete backup is kept after its last write: it may be running.
	Grace time.Duration
	// Schedule, when set, limits the policy to that schedule's backups; others are not considered.
	Schedule string
}

// Empty reports whether no Keep* rule is set.
func (p Policy) Empty() bool {
	return p.Last == 0 && p.Hourly == 0 && p.Daily == 0 && p.Weekly == 0 && p.Monthly == 0 && p.Yearly == 0
}

// Check rejects counts below -1 and a negative grace, naming the rule (keep-daily, grace).
func (p Policy) Check() error {
	for _, r := range p.rules() {
		if r.count < -1 {
			return badinput.Value("keep-"+r.name, strconv.Itoa(r.count), "want a count, or -1 for all")
		}
	}
	if p.Grace < 0 {
		return badinput.Value("grace", p.Grace.String(), "want a duration of 0 or more")
	}
	return nil
}

// Keep reasons, as Decision.Reasons holds them.
const (
	KeepLast    = "last"
	KeepHourly  = "hourly"
	KeepDaily   = "daily"
	KeepWeekly  = "weekly"
	KeepMonthly = "monthly"
	KeepYearly  = "yearly"
	// KeepNewest: the newest complete backup (of the schedule) is never removed.
	KeepNewest = "newest complete"
	// KeepReferencedPrefix starts the reason of a backup a migration run journal names.
	KeepReferencedPrefix = "referenced by run "
	// KeepRunning: a backup without a manifest whose heartbeat is fresh is being written.
	KeepRunning = "running"
	// KeepGrace: an incomplete backup written to within the grace period may be running.
	KeepGrace = "incomplete, within the grace period"
	// KeepVelero: a backup Velero wrote is Velero's to expire.
	KeepVelero = "written by Velero"
)

// Remove reasons.
const (
	RemoveUnkept     = "no rule keeps it"
	RemoveIncomplete = "incomplete, older than the grace period"
)

// Entry is a backup as retention sees it.
type Entry struct {
	Name  string `json:"name"`
	State string `json:"state"` // Complete, Velero, Running or Incomplete, as Classify decides
	// Schedule is the manifest's; for an incomplete backup, guessed from a name of the form
	// <schedule>-YYYYMMDD-HHMMSS.
	Schedule string `json:"schedule,omitempty"`
	// Cluster is the kube-system UID of the cluster a complete backup is of (its manifest's).
	Cluster string `json:"cluster,omitempty"`
	// Time is when the backup started (the manifest's startedAt); for others, their oldest file.
	Time time.Time `json:"time"`
	// LastWrite is when storage last modified one of its files.
	LastWrite time.Time `json:"lastWrite"`
	// Running is set for a backup in state Running (its heartbeat is fresh).
	Running bool `json:"running,omitempty"`
	// Runs are the migration runs that pinned the backup (PinBackup).
	Runs []string `json:"runs,omitempty"`
}

// Decision is what a policy does with one backup, and why.
type Decision struct {
	Entry
	Keep    bool     `json:"keep"`
	Reasons []string `json:"reasons"`
}

type rule struct {
	name   string
	count  int
	bucket func(Entry) string
}

func (p Policy) rules() []rule {
	return []rule{
		{KeepLast, p.Last, func(e Entry) string { return e.Name }},
		{KeepHourly, p.Hourly, func(e Entry) string { return e.Time.UTC().Format("2006-01-02T15") }},
		{KeepDaily, p.Daily, func(e Entry) string { return e.Time.UTC().Format("2006-01-02") }},
		{KeepWeekly, p.Weekly, func(e Entry) string {
			y, w := e.Time.UTC().ISOWeek()
			return fmt.Sprintf("%d-W%02d", y, w)
		}},
		{KeepMonthly, p.Monthly, func(e Entry) string { return e.Time.UTC().Format("2006-01") }},
		{KeepYearly, p.Yearly, func(e Entry) string { return e.Time.UTC().Format("2006") }},
	}
}

// InScope reports whether the policy considers the entry.
func (p Policy) InScope(e Entry) bool { return p.Schedule == "" || e.Schedule == p.Schedule }

// Apply decides, at now, which of the backups in scope to keep and which to remove, newest first.
// The rules keep each cluster's backups on their own (as restic's forget groups by host): two
// clusters that write one schedule into one storage (a restored copy of the schedule) do not
// take each other's places. Whatever the rules say, it never removes a cluster's newest complete
// backup, a complete backup a migration run references, a running one, or an incomplete one
// written to within the grace period; Velero's backups are left alone. Every other incomplete
// backup is removed, referenced or not: nothing incomplete is kept for ever.
func (p Policy) Apply(entries []Entry, now time.Time) []Decision {
	var out []Decision
	for _, e := range entries {
		if p.InScope(e) {
			out = append(out, Decision{Entry: e})
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].Time.Equal(out[j].Time) {
			return out[i].Time.After(out[j].Time)
		}
		return out[i].Name > out[j].Name
	})
	rules := p.rules()
	type tally struct {
		last []string
		left []int
	}
	clusters := map[string]*tally{}
	for i := range out {
		d := &out[i]
		switch d.State {
		case Complete:
			c := clusters[d.Cluster]
			if c == nil {
				c = &tally{last: make([]string, len(rules)), left: make([]int, len(rules))}
				for k, r := range rules {
					c.left[k] = r.count
				}
				clusters[d.Cluster] = c
				d.Reasons = append(d.Reasons, KeepNewest)
			}
			// Newest first: the first backup seen in a bucket is the newest of it.
			for k, r := range rules {
				if c.left[k] == 0 {
					continue
				}
				if b := r.bucket(d.Entry); b != c.last[k] {
					c.last[k] = b
					c.left[k]--
					d.Reasons = append(d.Reasons, r.name)
				}
			}
		case Velero:
			d.Reasons = append(d.Reasons, KeepVelero)
		default:
			switch {
			case d.Running || d.State == Running:
				d.Reasons = append(d.Reasons, KeepRunning)
			case now.Sub(d.LastWrite) < p.Grace:
				d.Reasons = append(d.Reasons, KeepGrace)
			}
		}
		// A run's reference keeps what it can restore. An incomplete backup it references was
		// begun by a run that was stopped: resumed, the run makes it again (migrate deletes it
		// first), so the reference does not keep it past the grace period.
		if d.State == Complete || d.State == Velero {
			for _, run := range d.Runs {
				d.Reasons = append(d.Reasons, KeepReferencedPrefix+run)
			}
		}
		d.Keep = len(d.Reasons) > 0
		if !d.Keep {
			if d.State == Complete {
				d.Reasons = []string{RemoveUnkept}
			} else {
				d.Reasons = []string{RemoveIncomplete}
			}
		}
	}
	return out
}

// scheduleName matches the default name of a scheduled backup: <schedule>-YYYYMMDD-HHMMSS.
var scheduleName = regexp.MustCompile(`^(.+)-[0-9]{8}-[0-9]{6}$`)

// ScheduledName is the default name of a backup a schedule starts at t.
func ScheduledName(schedule string, t time.Time) string {
	return schedule + "-" + t.UTC().Format("20060102-150405")
}

// History describes every backup in storage as retention sees it, at now, each in the state
// Classify decides: a complete backup's schedule and start time come from the head of its
// manifest; an incomplete one's schedule from its name. A backup whose manifest cannot be read
// is an error naming it: prune removes nothing it cannot judge.
func History(ctx context.Context, store storage.Backend, now time.Time) ([]Entry, error) {
	sts, errs, err := Scan(ctx, store, now)
	if err != nil {
		return nil, err
	}
	if len(errs) > 0 {
		var all []error
		for _, e := range errs {
			all = append(all, e)
		}
		return nil, errors.Join(all...)
	}
	out := make([]Entry, 0, len(sts))
	for _, st := range sts {
		e := Entry{Name: st.Name, State: st.State, Time: st.FirstWrite, LastWrite: st.LastWrite, Running: st.State == Running, Runs: st.Pins}
		switch st.State {
		case Complete:
			e.Schedule, e.Cluster = st.Head.Schedule, st.Head.Source.UID
			if !st.Head.StartedAt.IsZero() {
				e.Time = st.Head.StartedAt
			}
		case Incomplete, Running:
			if m := scheduleName.FindStringSubmatch(st.Name); m != nil {
				e.Schedule = m[1]
			}
		}
		out = append(out, e)
	}
	return out, nil
}

// Latest names the newest complete backup (by start time), of the schedule when one is given.
// Velero's backups are not considered: only a ferry backup records its schedule. A schedule is
// one cluster's: when its two newest backups are of two clusters (a restored copy of it runs
// beside the original, from its first night; or it has just moved, migrated or recovered onto
// another cluster), the newest may be the copy's, and Latest names each cluster's newest instead
// of choosing. Once the cluster that took it over has made two, its newest is chosen.
func Latest(ctx context.Context, store storage.Backend, schedule string) (string, error) {
	entries, err := History(ctx, store, time.Now())
	if err != nil {
		return "", err
	}
	entries = slices.DeleteFunc(entries, func(e Entry) bool { return e.State != Complete || (schedule != "" && e.Schedule != schedule) })
	if len(entries) == 0 {
		if schedule != "" {
			return "", badinput.Errorf("no complete backup of schedule %q in %s (see ferry backups list)", schedule, store)
		}
		return "", badinput.Errorf("no complete backup in %s (see ferry backups list)", store)
	}
	slices.SortFunc(entries, func(a, b Entry) int { // newest first
		return cmp.Or(b.Time.Compare(a.Time), strings.Compare(b.Name, a.Name))
	})
	best := entries[0]
	if schedule != "" && len(entries) > 1 && entries[1].Cluster != best.Cluster {
		newest := map[string]string{}
		for _, e := range entries {
			if _, seen := newest[e.Cluster]; !seen {
				newest[e.Cluster] = e.Name + " (cluster " + cmp.Or(e.Cluster, "not recorded") + ")"
			}
		}
		each := slices.Sorted(maps.Values(newest))
		return "", badinput.Errorf("the newest backups of schedule %q in %s are of %d clusters: a restored copy of the schedule runs beside the original, or it has just moved to another cluster; their newest are %s: name the backup to use (see ferry backups list)",
			schedule, store, len(each), strings.Join(each, ", "))
	}
	return best.Name, nil
}

// LatestRef is the backup reference restore and verify resolve with Latest: "latest", or
// "latest:SCHEDULE".
const LatestRef = "latest"

// Resolve turns a backup reference into a backup name: "latest" is the newest complete backup,
// "latest:SCHEDULE" that of the schedule; any other reference is a name, checked.
func Resolve(ctx context.Context, store storage.Backend, ref string) (string, error) {
	if ref == LatestRef {
		return Latest(ctx, store, "")
	}
	if schedule, ok := strings.CutPrefix(ref, LatestRef+":"); ok {
		if schedule == "" {
			return "", badinput.Errorf("backup %q: name a schedule after latest:", ref)
		}
		return Latest(ctx, store, schedule)
	}
	return ref, CheckName(ref)
}

// IsLatestRef reports whether ref is resolved by Resolve rather than a backup name.
func IsLatestRef(ref string) bool {
	return ref == LatestRef || strings.HasPrefix(ref, LatestRef+":")
}

package snapshot

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
)

// Statuses of items in a restore or verify report.
const (
	// Restore.
	StatusRestored  = "restored"  // created on the target
	StatusUnchanged = "unchanged" // already there (as the backup holds it, or left alone by --existing skip)
	StatusUpdated   = "updated"   // already there and updated to the backup's version
	StatusSkipped   = "skipped"   // deliberately not restored; the detail says why
	StatusFailed    = "failed"    // could not be restored or checked; the detail says why
	// StatusRecreated counts items the target makes anew by design: volumes its provisioner
	// provisions for restored claims, objects a restored controller recreated.
	StatusRecreated = "recreated"
	// StatusDeleted lists what a restore that replaces the target's copies (a carry-back) deleted
	// there because the backup does not hold it.
	StatusDeleted = "deleted"
	// StatusLeft counts what an upgrade does not move: objects green's release provides, CRDs
	// green has (never changed), and lists those --leave-behind keeps on blue.
	StatusLeft = "left"
	// StatusAwaiting lists objects an admission webhook refused because its server could not be
	// called, while a writer the run stopped may be that server: the run makes them once the
	// writers start (resources.Objects.AwaitAdmission).
	StatusAwaiting = "awaiting"

	// Verify.
	StatusIdentical = "identical"
	// StatusAdmitted lists objects the target holds as its admission makes the backup's (a mutating
	// policy or webhook of the target changed it as it changes anything made there), and rollout
	// histories that go on with a revision of the template it made so: a note, not a loss.
	StatusAdmitted = "admitted"
	// StatusAutoscaled lists workloads whose replicas the target's autoscaler set (a
	// HorizontalPodAutoscaler scales them, or the Deployment of a ReplicaSet it scales): green's
	// load decides them, not blue's; a note, not a loss.
	StatusAutoscaled = "autoscaled"
	StatusMissing    = "missing"
	StatusDifferent  = "different"
	StatusHealthy    = "healthy"
	StatusUnhealthy  = "unhealthy"
)

// fine says whether status is that of an item that is fine: a listed one is a note.
func fine(status string) bool {
	switch status {
	case StatusRestored, StatusUnchanged, StatusUpdated, StatusIdentical, StatusAdmitted, StatusAutoscaled, StatusHealthy:
		return true
	}
	return false
}

// Report collects what a restore or a verify did with every item, by kind of data. Items that are
// fine are only counted, or listed as notes (Notes) when something was done beside what the
// backup holds; every other item is listed with what is wrong with it (Problems).
type Report struct {
	mu sync.Mutex
	// Counts are by kind ("objects", "volumes", ...) and status.
	Counts map[string]map[string]int `json:"counts"`
	Items  []ReportItem              `json:"items"`
	// Sent are the bytes of data a restore sent to the target, by kind: of a volume restored
	// after an earlier restore of the same claims (a warm run's), only what changed since.
	Sent map[string]int64 `json:"sent,omitempty"`
}

// ReportItem is one item that is not fine, or that was skipped.
type ReportItem struct {
	Kind   string `json:"kind"`
	Status string `json:"status"`
	Name   string `json:"name"`
	Detail string `json:"detail,omitempty"`
}

// Count counts an item that is fine (restored, unchanged, updated, identical).
func (r *Report) Count(kind, status string) { r.CountN(kind, status, 1) }

// CountN counts n items.
func (r *Report) CountN(kind, status string, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.count(kind, status, n)
}

func (r *Report) count(kind, status string, n int) {
	if r.Counts == nil {
		r.Counts = map[string]map[string]int{}
	}
	if r.Counts[kind] == nil {
		r.Counts[kind] = map[string]int{}
	}
	r.Counts[kind][status] += n
}

// Add counts an item and lists it with what is wrong with it (or, of an item that is fine, what
// was done beside what the backup holds): name it exactly (an object as
// "apps/v1 Deployment ns/name", a file as "ns/claim:path/in/volume", a table as "db.schema.table").
func (r *Report) Add(kind, status, name, detail string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.count(kind, status, 1)
	r.Items = append(r.Items, ReportItem{Kind: kind, Status: status, Name: name, Detail: detail})
}

// Merge adds o's counts, items and bytes sent to r's.
func (r *Report) Merge(o *Report) {
	o.mu.Lock()
	defer o.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	for kind, counts := range o.Counts {
		for status, n := range counts {
			r.count(kind, status, n)
		}
	}
	r.Items = append(r.Items, o.Items...)
	for kind, n := range o.Sent {
		r.addSent(kind, n)
	}
}

// AddSent adds n bytes sent to the target to kind's.
func (r *Report) AddSent(kind string, n int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.addSent(kind, n)
}

func (r *Report) addSent(kind string, n int64) {
	if r.Sent == nil {
		r.Sent = map[string]int64{}
	}
	r.Sent[kind] += n
}

// Addf is Add with a formatted detail.
func (r *Report) Addf(kind, status, name, format string, args ...any) {
	r.Add(kind, status, name, fmt.Sprintf(format, args...))
}

// AddNotInBackup lists as skipped, under kind, the items of manifest m's Skipped of kind
// skippedKind ("database", "bucket"): what a restore cannot bring back, as the backup does not
// hold it.
func (r *Report) AddNotInBackup(kind string, m *Manifest, skippedKind string) {
	for _, s := range m.Skipped {
		if s.Kind == skippedKind {
			r.Add(kind, StatusSkipped, s.Name, "not in the backup: "+s.Reason)
		}
	}
}

// Problems are the listed items with the given statuses; when none are given, every listed item
// but notes: an item listed with a status that is fine (restored, updated, unchanged, identical,
// healthy) says what was done beside what the backup holds (a claim restored larger than it was).
func (r *Report) Problems(statuses ...string) []ReportItem {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []ReportItem
	for _, it := range r.Items {
		if len(statuses) == 0 && !fine(it.Status) || slices.Contains(statuses, it.Status) {
			out = append(out, it)
		}
	}
	return out
}

// Notes are the listed items of a status that is fine (see Problems).
func (r *Report) Notes() []ReportItem {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []ReportItem
	for _, it := range r.Items {
		if fine(it.Status) {
			out = append(out, it)
		}
	}
	return out
}

// Sort orders the listed items by kind, name and status, for stable output.
func (r *Report) Sort() {
	r.mu.Lock()
	defer r.mu.Unlock()
	sort.SliceStable(r.Items, func(i, j int) bool {
		a, b := r.Items[i], r.Items[j]
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return a.Status < b.Status
	})
}

// kindOrder is the order kinds are shown in.
var kindOrder = []string{"objects", "volumes", "databases", "buckets", "health"}

// Print writes a table of counts by kind and, grouped by kind, every listed item.
func (r *Report) Print(w io.Writer) error {
	r.Sort()
	r.mu.Lock()
	defer r.mu.Unlock()
	kinds := slices.Sorted(maps.Keys(r.Counts))
	sort.SliceStable(kinds, func(i, j int) bool { return rank(kinds[i]) < rank(kinds[j]) })
	statuses := map[string]bool{}
	for _, c := range r.Counts {
		for s := range c {
			statuses[s] = true
		}
	}
	cols := slices.Sorted(maps.Keys(statuses))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "KIND\t%s\n", strings.ToUpper(strings.Join(cols, "\t")))
	for _, k := range kinds {
		fmt.Fprint(tw, k)
		for _, s := range cols {
			fmt.Fprintf(tw, "\t%d", r.Counts[k][s])
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	kind := ""
	for _, it := range r.Items {
		if it.Kind != kind {
			kind = it.Kind
			fmt.Fprintf(w, "\n%s\n", strings.ToUpper(kind))
		}
		line := fmt.Sprintf("  %-10s %s", it.Status, it.Name)
		if it.Detail != "" {
			line += ": " + it.Detail
		}
		if _, err := fmt.Fprintln(w, line); err != nil {
			return err
		}
	}
	return nil
}

func rank(kind string) int {
	if i := slices.Index(kindOrder, kind); i >= 0 {
		return i
	}
	return len(kindOrder)
}

// Mapping renames what a restore puts onto the target: namespaces and storage classes.
type Mapping struct {
	Namespaces     map[string]string `json:"namespaces,omitempty"`
	StorageClasses map[string]string `json:"storageClasses,omitempty"`
}

// Namespace is the target namespace of a source namespace.
func (m Mapping) Namespace(ns string) string {
	if to, ok := m.Namespaces[ns]; ok && ns != "" {
		return to
	}
	return ns
}

// StorageClass is the target storage class of a source storage class.
func (m Mapping) StorageClass(class string) string {
	if to, ok := m.StorageClasses[class]; ok {
		return to
	}
	return class
}

// Inverse maps back what m mapped: the target's names to the source's. Namespaces map one to one
// (config.CheckNamespaceMap refuses two made one, in flags and ferry.yaml alike); a storage class
// that several classes were mapped to has no single way back and is left as it is, and so is one
// that claims of no class were mapped to (a claim made on the target in it is provisioned, and on
// the source it must be too).
func (m Mapping) Inverse() Mapping {
	out := Mapping{Namespaces: map[string]string{}, StorageClasses: map[string]string{}}
	for _, from := range slices.Sorted(maps.Keys(m.Namespaces)) {
		if to := m.Namespaces[from]; out.Namespaces[to] == "" {
			out.Namespaces[to] = from
		}
	}
	sources := map[string]int{}
	for _, to := range m.StorageClasses {
		sources[to]++
	}
	for from, to := range m.StorageClasses {
		if sources[to] == 1 && from != "" {
			out.StorageClasses[to] = from
		}
	}
	return out
}

package snapshot

import (
	"slices"
	"testing"
)

func TestProblemsLeaveNotesOut(t *testing.T) {
	var r Report
	r.Add("objects", StatusRestored, "v1 PersistentVolumeClaim ns/p", "its storage request raised from 1Gi to 6Gi")
	r.Add("objects", StatusSkipped, "v1 ConfigMap ns/c", "why")
	r.Add("volumes", StatusFailed, "ns/p:f", "why")
	r.Add("objects", StatusDifferent, "v1 Secret ns/s", "why")
	var names []string
	for _, it := range r.Problems() {
		names = append(names, it.Name)
	}
	if want := []string{"v1 ConfigMap ns/c", "ns/p:f", "v1 Secret ns/s"}; !slices.Equal(names, want) {
		t.Errorf("problems %v, want %v", names, want)
	}
	if got := r.Problems(StatusRestored); len(got) != 1 {
		t.Errorf("the notes asked for by status: %v", got)
	}
	if got := r.Notes(); len(got) != 1 || got[0].Name != "v1 PersistentVolumeClaim ns/p" {
		t.Errorf("notes %v, want the claim's", got)
	}
	if r.Counts["objects"][StatusRestored] != 1 {
		t.Errorf("a note is counted as its status: %v", r.Counts)
	}
}

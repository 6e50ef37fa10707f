package databases

import (
	"reflect"
	"strings"
	"testing"

	"github.com/ferrykube/ferry/snapshot"
)

func TestReadingsAroundTheDump(t *testing.T) {
	before := []snapshot.Table{
		{Schema: "app", Name: "quiet", Rows: 2, Checksum: "q"},
		{Schema: "app", Name: "events", Rows: 10, Checksum: "e10"},
		{Schema: "app", Name: "edited", Rows: 3, Checksum: "d1"},
		{Schema: "app", Name: "dropped", Rows: 1, Checksum: "x"},
	}
	after := []snapshot.Table{
		{Schema: "app", Name: "quiet", Rows: 2, Checksum: "q"},
		{Schema: "app", Name: "events", Rows: 12, Checksum: "e12"},
		{Schema: "app", Name: "edited", Rows: 3, Checksum: "d2"},
		{Schema: "app", Name: "made", Rows: 5, Checksum: "m"},
	}
	tables, large := readingsAround(before, after,
		[]snapshot.LargeObjects{{Database: "a", Count: 1, Checksum: "1"}, {Database: "b", Count: 1, Checksum: "1"}},
		[]snapshot.LargeObjects{{Database: "a", Count: 1, Checksum: "1"}, {Database: "b", Count: 2, Checksum: "2"}})
	want := []snapshot.Table{
		after[0],
		{Schema: "app", Name: "events", Rows: 12, Checksum: "e12", BeforeDump: &snapshot.Reading{Count: 10, Checksum: "e10"}},
		{Schema: "app", Name: "edited", Rows: 3, Checksum: "d2", BeforeDump: &snapshot.Reading{Count: 3, Checksum: "d1"}},
		after[3], // made while dumped: no reading before, kept as read after
	}
	if !reflect.DeepEqual(tables, want) {
		t.Errorf("tables %+v\nwant %+v", tables, want)
	}
	if large[0].BeforeDump != nil || large[1].BeforeDump == nil || *large[1].BeforeDump != (snapshot.Reading{Count: 1, Checksum: "1"}) {
		t.Errorf("large objects %+v", large)
	}
	if got := (snapshot.Database{Tables: tables, LargeObjects: large}).WrittenWhileDumped(); !reflect.DeepEqual(got, []string{"app.events", "app.edited", "b.pg_catalog.pg_largeobject"}) {
		t.Errorf("written while dumped: %v", got)
	}
	if _, large := readingsAround(nil, nil, nil, nil); large != nil {
		t.Errorf("no large objects read: %+v, want nil (not recorded)", large)
	}
}

// A table written to while it was dumped is the same as the backup when the target has either
// reading around the dump, and otherwise named as one that cannot be checked, not as a difference.
func TestCompareTablesWrittenWhileDumped(t *testing.T) {
	d := snapshot.Database{Name: "db", Tables: []snapshot.Table{
		{Schema: "app", Name: "as-before", Rows: 12, Checksum: "e12", BeforeDump: &snapshot.Reading{Count: 10, Checksum: "e10"}},
		{Schema: "app", Name: "as-after", Rows: 12, Checksum: "e12", BeforeDump: &snapshot.Reading{Count: 10, Checksum: "e10"}},
		{Schema: "app", Name: "between", Rows: 12, Checksum: "e12", BeforeDump: &snapshot.Reading{Count: 10, Checksum: "e10"}},
		{Schema: "app", Name: "gone", Rows: 12, Checksum: "e12", BeforeDump: &snapshot.Reading{Count: 10, Checksum: "e10"}},
	}}
	got := compareTables(d, []snapshot.Table{
		{Schema: "app", Name: "as-before", Rows: 10, Checksum: "e10"},
		{Schema: "app", Name: "as-after", Rows: 12, Checksum: "e12"},
		{Schema: "app", Name: "between", Rows: 11, Checksum: "e11"},
	})
	if len(got) != 2 || got[0].name != "db/app.between" || got[0].status != snapshot.StatusSkipped || !got[0].unchecked ||
		!strings.Contains(got[0].detail, "written to while it was dumped (10 rows before the dump, 12 after; the target has 11)") ||
		got[1].name != "db/app.gone" || got[1].status != snapshot.StatusMissing {
		t.Fatalf("differences %+v", got)
	}
}

package snapshot

import (
	"cmp"
	"slices"
	"strings"
	"time"
)

// SchemaChange is how one database's schema differs between two readings: before (as a backup
// recorded it) and after (as the same database's server, or a later backup, has it), by table
// and column, never by value. An upgrade's report shows it for each database the run moved:
// what green's release migrated.
type SchemaChange struct {
	Database string `json:"database"`
	Engine   string `json:"engine"`
	// After says where and when the after side was read ("green at the shift", ...).
	After        string    `json:"after"`
	ReadAt       time.Time `json:"readAt,omitzero"`
	Unread       string    `json:"unread,omitempty"` // why the after side could not be read
	TablesBefore int       `json:"tablesBefore"`
	TablesAfter  int       `json:"tablesAfter"`
	// Tables are the tables added or dropped; Columns the columns added, dropped or retyped,
	// and primary keys changed (Column "PRIMARY KEY").
	Tables  []TableChange  `json:"tables,omitempty"`
	Columns []ColumnChange `json:"columns,omitempty"`
}

// TableChange is a table only on one side: Added or not (dropped), with its columns.
type TableChange struct {
	Table   string   `json:"table"` // schema.table
	Added   bool     `json:"added"`
	Columns []Column `json:"columns,omitempty"`
}

// ColumnChange is a column of a table both sides have: Before or After is empty when the column
// is only on the other side.
type ColumnChange struct {
	Table  string `json:"table"`
	Column string `json:"column"`
	Before string `json:"before,omitempty"`
	After  string `json:"after,omitempty"`
}

// PrimaryKey is the ColumnChange.Column of a changed primary key.
const PrimaryKey = "PRIMARY KEY"

// Unchanged says both sides hold the same tables, columns, types and keys.
func (s SchemaChange) Unchanged() bool {
	return s.Unread == "" && len(s.Tables) == 0 && len(s.Columns) == 0
}

// CompareSchemas says how the tables after differ from before, by name; types are compared
// without regard to case (engines report them so). Rows and checksums are not compared, nor
// the columns of a table the before side recorded none of (backups made before format 3).
func CompareSchemas(before, after []Table) SchemaChange {
	name := func(t Table) string { return t.Schema + "." + t.Name }
	was := map[string]Table{}
	for _, t := range before {
		was[name(t)] = t
	}
	s := SchemaChange{TablesBefore: len(before), TablesAfter: len(after)}
	now := map[string]bool{}
	for _, t := range after {
		n := name(t)
		now[n] = true
		old, ok := was[n]
		if !ok {
			s.Tables = append(s.Tables, TableChange{Table: n, Added: true, Columns: t.Columns})
			continue
		}
		s.Columns = append(s.Columns, compareColumns(n, old, t)...)
	}
	for _, t := range before {
		if !now[name(t)] {
			s.Tables = append(s.Tables, TableChange{Table: name(t), Columns: t.Columns})
		}
	}
	slices.SortFunc(s.Tables, func(a, b TableChange) int { return cmp.Compare(a.Table, b.Table) })
	return s
}

// compareColumns lists the columns of one table added, dropped or retyped, in the order of the
// after side (then the dropped ones in the before side's), and a changed primary key.
func compareColumns(table string, before, after Table) []ColumnChange {
	var out []ColumnChange
	if len(before.Columns) == 0 {
		return nil // a backup made before tables' columns were recorded: nothing to compare
	}
	was := map[string]string{}
	for _, c := range before.Columns {
		was[c.Name] = c.Type
	}
	now := map[string]bool{}
	for _, c := range after.Columns {
		now[c.Name] = true
		if old, ok := was[c.Name]; !ok || !strings.EqualFold(old, c.Type) {
			out = append(out, ColumnChange{Table: table, Column: c.Name, Before: old, After: c.Type})
		}
	}
	for _, c := range before.Columns {
		if !now[c.Name] {
			out = append(out, ColumnChange{Table: table, Column: c.Name, Before: c.Type})
		}
	}
	if !slices.Equal(before.Key, after.Key) {
		out = append(out, ColumnChange{Table: table, Column: PrimaryKey, Before: keyText(before.Key), After: keyText(after.Key)})
	}
	return out
}

func keyText(key []string) string {
	if len(key) == 0 {
		return "none"
	}
	return "(" + strings.Join(key, ", ") + ")"
}

package databases

import (
	"fmt"

	"github.com/ferrykube/ferry/snapshot"
)

// column is a table's column on a live server, with what loading rows into it needs.
type column struct {
	snapshot.Column
	// NotNull columns refuse a row without a value unless Filled.
	NotNull bool
	// Filled columns get a value when a row gives none: a default, auto-increment or identity,
	// or a generated column.
	Filled bool
	// Generated columns are computed by the server and take no value.
	Generated bool
}

// shape is a table's columns and primary key on a live server.
type shape struct {
	Schema, Name string // Schema as snapshot.Table names it (PostgreSQL: "database.schema")
	Columns      []column
	Key          []string
	// Partitioned tables (PostgreSQL's) hold no rows of their own: their partitions, tables of
	// their own, do.
	Partitioned bool
	// ForeignKeys are the table's foreign keys to other tables (PostgreSQL's, but the copies in
	// partitions of a partitioned table's).
	ForeignKeys []foreignKey
	// Triggers are the table's triggers that fire on its writes (PostgreSQL's; a partition's
	// are its own).
	Triggers []trigger
}

// trigger is a table's trigger and when it fires (pg_trigger.tgenabled: O as the session's role is
// the origin's, A always).
type trigger struct{ Name, Enabled string }

// foreignKey is a table's foreign key: its name, the table it references, whether its check
// may be put off to the end of a transaction, and what a delete of a referenced row does
// (pg_constraint.confdeltype: a nothing, r refuse, c delete, n set null, d set the default).
type foreignKey struct {
	Name                     string
	ParentSchema, ParentName string
	Deferrable               bool
	OnDelete                 string
}

func (s shape) column(name string) (column, bool) {
	for _, c := range s.Columns {
		if c.Name == name {
			return c, true
		}
	}
	return column{}, false
}

func tableKey(schema, name string) string { return schema + "\x00" + name }

// shapesInto returns the shape of a table in out, added when it is not there yet.
func shapesInto(out map[string]*shape) func(schema, name string) *shape {
	return func(schema, name string) *shape {
		k := tableKey(schema, name)
		if out[k] == nil {
			out[k] = &shape{Schema: schema, Name: name}
		}
		return out[k]
	}
}

// readShapeRows reads the rows of mysqlShapeSQL or pgShapeSQL; prefix is put before schemas.
func readShapeRows(rows [][]string, prefix string, get func(schema, name string) *shape) error {
	truth := func(s string) bool { return s == "1" || s == "t" }
	for _, r := range rows {
		switch {
		case len(r) == 8 && r[0] == "c":
			s := get(prefix+r[1], r[2])
			s.Columns = append(s.Columns, column{Column: snapshot.Column{Name: r[3], Type: r[4]}, NotNull: truth(r[5]), Filled: truth(r[6]), Generated: truth(r[7])})
		case len(r) == 4 && r[0] == "k":
			s := get(prefix+r[1], r[2])
			s.Key = append(s.Key, r[3])
		case len(r) == 3 && r[0] == "p":
			get(prefix+r[1], r[2]).Partitioned = true
		case len(r) == 5 && r[0] == "t":
			s := get(prefix+r[1], r[2])
			s.Triggers = append(s.Triggers, trigger{Name: r[3], Enabled: r[4]})
		case len(r) == 8 && r[0] == "f":
			s := get(prefix+r[1], r[2])
			s.ForeignKeys = append(s.ForeignKeys, foreignKey{Name: r[3], ParentSchema: prefix + r[4], ParentName: r[5], Deferrable: truth(r[6]), OnDelete: r[7]})
		default:
			return fmt.Errorf("the server's list of columns has a row of %d fields", len(r))
		}
	}
	return nil
}

// recordShapes sets the columns and key of each table from the shapes read on the source.
func recordShapes(tables []snapshot.Table, shapes map[string]*shape) error {
	for i, t := range tables {
		s := shapes[tableKey(t.Schema, t.Name)]
		if s == nil || len(s.Columns) == 0 {
			return fmt.Errorf("table %s.%s: no columns found", t.Schema, t.Name)
		}
		for _, c := range s.Columns {
			tables[i].Columns = append(tables[i].Columns, c.Column)
		}
		tables[i].Key = s.Key
	}
	return nil
}

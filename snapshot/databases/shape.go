package databases

import (
	"context"
	"fmt"
	"strings"

	"github.com/ferrykube/ferry/plans"
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

// shapes reads the columns and primary keys of the base tables of the MySQL schemas or
// PostgreSQL databases, by tableKey.
func (c Dumps) shapes(ctx context.Context, item plans.DataItem, container string, cred credentials, engine string, schemas []string) (map[string]*shape, error) {
	out := map[string]*shape{}
	get := func(schema, name string) *shape {
		k := tableKey(schema, name)
		if out[k] == nil {
			out[k] = &shape{Schema: schema, Name: name}
		}
		return out[k]
	}
	if engine != "postgresql" {
		in := make([]string, len(schemas))
		for i, s := range schemas {
			in[i] = quote(s)
		}
		rows, err := c.query(ctx, item, container, cred, mysqlShapeSQL(strings.Join(in, ",")))
		if err != nil {
			return nil, fmt.Errorf("read the tables' columns: %w", err)
		}
		if err := readShapeRows(rows, "", get); err != nil {
			return nil, err
		}
		return out, nil
	}
	rows, err := c.pgQuery(ctx, item, container, cred, "postgres", "SELECT datname FROM pg_database;")
	if err != nil {
		return nil, fmt.Errorf("list databases: %w", err)
	}
	exists := map[string]bool{}
	for _, r := range rows {
		exists[r[0]] = true
	}
	for _, db := range schemas {
		if !exists[db] {
			continue // its tables are not there
		}
		rows, err := c.pgQuery(ctx, item, container, cred, db, pgShapeSQL)
		if err != nil {
			return nil, fmt.Errorf("database %s: read the tables' columns: %w", db, err)
		}
		if err := readShapeRows(rows, db+".", get); err != nil {
			return nil, fmt.Errorf("database %s: %w", db, err)
		}
	}
	return out, nil
}

// mysqlShapeSQL lists columns ("c", schema, table, name, type, not null, filled, generated) and
// primary key columns ("k", schema, table, name) of the base tables of the schemas, in order.
func mysqlShapeSQL(schemas string) string {
	return `SELECT 'c', c.table_schema, c.table_name, c.column_name, c.column_type, c.is_nullable = 'NO',
 (c.column_default IS NOT NULL OR c.extra LIKE '%auto_increment%' OR c.extra LIKE '%GENERATED%' OR c.extra LIKE '%PERSISTENT%'),
 (c.extra LIKE '%GENERATED%' OR c.extra LIKE '%PERSISTENT%' OR c.extra LIKE '%VIRTUAL%')
 FROM information_schema.columns c JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name
 WHERE t.table_type = 'BASE TABLE' AND c.table_schema IN (` + schemas + `) ORDER BY c.table_schema, c.table_name, c.ordinal_position;
SELECT 'k', table_schema, table_name, column_name FROM information_schema.key_column_usage
 WHERE constraint_name = 'PRIMARY' AND table_schema IN (` + schemas + `) ORDER BY table_schema, table_name, ordinal_position;`
}

// pgShapeSQL is mysqlShapeSQL for a PostgreSQL database.
const pgShapeSQL = `SELECT 'c', n.nspname, c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
 (a.atthasdef OR a.attidentity <> '' OR a.attgenerated <> ''), a.attgenerated <> ''
 FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped AND n.nspname NOT IN ('pg_catalog', 'information_schema')
 ORDER BY 2, 3, a.attnum;
SELECT 'k', n.nspname, c.relname, a.attname FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
 JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY(i.indkey)
 WHERE i.indisprimary AND c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema')
 ORDER BY 2, 3, array_position(i.indkey::int2[], a.attnum);`

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

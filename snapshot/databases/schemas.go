package databases

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/ferrykube/ferry/snapshot"
	"k8s.io/client-go/dynamic"
)

// SchemaChanges reads the schema of each database of the backup on the target (the backed-up
// MySQL schemas or PostgreSQL databases: tables, columns, types and primary keys) and says how
// it differs from the one the backup recorded; after names the reading ("green at the shift").
// A database that cannot be read is listed with why, not left out.
func (c Dumps) SchemaChanges(ctx context.Context, r *snapshot.Reader, after string) ([]snapshot.SchemaChange, error) {
	if len(r.Manifest.Databases) == 0 {
		return nil, nil
	}
	dyn, err := c.dynamicClient()
	if err != nil {
		return nil, err
	}
	var out []snapshot.SchemaChange
	for _, d := range r.Manifest.Databases {
		if len(d.Schemas) == 0 {
			continue
		}
		tables, err := c.liveTables(ctx, r, d, dyn)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var change snapshot.SchemaChange
		if err != nil {
			change.Unread = err.Error()
		} else {
			change = snapshot.CompareSchemas(d.Tables, tables)
		}
		change.Database, change.Engine, change.After, change.ReadAt = d.Name, d.Engine, after, time.Now().UTC()
		out = append(out, change)
	}
	return out, nil
}

// liveTables are the tables of a backed-up database on the target, with their columns and
// primary keys (no rows or checksums), in order.
func (c Dumps) liveTables(ctx context.Context, r *snapshot.Reader, d snapshot.Database, dyn dynamic.Interface) ([]snapshot.Table, error) {
	t, err := c.locate(ctx, dyn, r, d)
	if err != nil {
		return nil, err
	}
	shapes, err := t.eng.shapes(ctx, c, t, d.Schemas)
	if err != nil {
		return nil, err
	}
	tables := make([]snapshot.Table, 0, len(shapes))
	for _, s := range shapes {
		tbl := snapshot.Table{Schema: s.Schema, Name: s.Name, Key: s.Key}
		for _, col := range s.Columns {
			tbl.Columns = append(tbl.Columns, col.Column)
		}
		tables = append(tables, tbl)
	}
	slices.SortFunc(tables, func(a, b snapshot.Table) int {
		return cmp.Or(cmp.Compare(a.Schema, b.Schema), cmp.Compare(a.Name, b.Name))
	})
	return tables, nil
}

package snapshot

import (
	"reflect"
	"testing"
)

func TestCompareSchemas(t *testing.T) {
	runs := Table{Schema: "mlpipeline", Name: "run_details", Key: []string{"id"},
		Columns: []Column{{Name: "id", Type: "int(11)"}, {Name: "name", Type: "varchar(64)"}, {Name: "score", Type: "double"}}}
	jobs := Table{Schema: "mlpipeline", Name: "jobs", Key: []string{"id"}, Columns: []Column{{Name: "id", Type: "int(11)"}}}
	version := Table{Schema: "mlpipeline", Name: "schema_version", Key: []string{"version"}, Columns: []Column{{Name: "version", Type: "int(11)"}}}
	migrated := runs
	migrated.Columns = []Column{{Name: "id", Type: "bigint(20)"}, {Name: "name", Type: "VARCHAR(64)"}, {Name: "state", Type: "varchar(32)"}}
	migrated.Key = []string{"id", "name"}
	for _, tc := range []struct {
		name          string
		before, after []Table
		want          SchemaChange
	}{
		{name: "same", before: []Table{runs, jobs}, after: []Table{jobs, runs},
			want: SchemaChange{TablesBefore: 2, TablesAfter: 2}},
		{name: "a table added, one dropped", before: []Table{runs, jobs}, after: []Table{runs, version},
			want: SchemaChange{TablesBefore: 2, TablesAfter: 2, Tables: []TableChange{
				{Table: "mlpipeline.jobs", Columns: jobs.Columns},
				{Table: "mlpipeline.schema_version", Added: true, Columns: version.Columns}}}},
		{name: "columns added, dropped, retyped; the key changed; case of types ignored", before: []Table{runs}, after: []Table{migrated},
			want: SchemaChange{TablesBefore: 1, TablesAfter: 1, Columns: []ColumnChange{
				{Table: "mlpipeline.run_details", Column: "id", Before: "int(11)", After: "bigint(20)"},
				{Table: "mlpipeline.run_details", Column: "state", After: "varchar(32)"},
				{Table: "mlpipeline.run_details", Column: "score", Before: "double"},
				{Table: "mlpipeline.run_details", Column: PrimaryKey, Before: "(id)", After: "(id, name)"}}}},
		{name: "a backup without columns compares tables only", before: []Table{{Schema: "mlpipeline", Name: "run_details"}}, after: []Table{migrated},
			want: SchemaChange{TablesBefore: 1, TablesAfter: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := CompareSchemas(tc.before, tc.after)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("CompareSchemas:\n got %+v\nwant %+v", got, tc.want)
			}
			if got.Unchanged() != (len(tc.want.Tables)+len(tc.want.Columns) == 0) {
				t.Errorf("Unchanged() = %v", got.Unchanged())
			}
		})
	}
}

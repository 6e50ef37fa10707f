package migrate

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/snapshot"
)

// A run's report says what of its journal and backups is encrypted, to whom, and what stays
// readable: the journal never is encrypted, each backup as its manifest says, and a backup not
// complete is said to be unknown rather than guessed.
func TestReportSaysWhatIsEncrypted(t *testing.T) {
	ctx := context.Background()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	recipient := id.Recipient().String()
	for _, tc := range []struct {
		name       string
		recipients []string
		complete   bool
		want       []string
	}{
		{"encrypted", []string{recipient}, true, []string{
			"  journal: not encrypted", "    in plain text: the run's configuration (secret values in it are references: valueFrom)",
			"  backup b1: encrypted with age to " + recipient + ": the object archive (Secrets included), database dumps, volume files",
			"    in plain text: the manifest: names of namespaces",
		}},
		{"plain", nil, true, []string{"  backup b1: not encrypted", "    in plain text: everything: the objects (Secrets included)"}},
		{"backup not complete", []string{recipient}, false, []string{"  backup b1: encryption not known, no complete backup to read it from"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := fileStore(t)
			w, err := snapshot.Create(ctx, store, "b1", plans.Cluster{}, &plans.Plan{}, time.Now(), tc.recipients)
			if err != nil {
				t.Fatal(err)
			}
			if tc.complete {
				if _, err := w.Commit(ctx, time.Now()); err != nil {
					t.Fatal(err)
				}
			}
			j, err := CreateJournal(ctx, store, Run{ID: NewID(time.Now()), Backup: "b1"})
			if err != nil {
				t.Fatal(err)
			}
			rep := ReadReport(ctx, j)
			if len(rep.Protection) != 2 || rep.Protection[0].What != "journal" || rep.Protection[1].What != "backup b1" {
				t.Fatalf("protection %+v; want the journal and backup b1", rep.Protection)
			}
			var out strings.Builder
			if err := rep.Print(&out); err != nil {
				t.Fatal(err)
			}
			for _, line := range tc.want {
				if !strings.Contains(out.String(), line) {
					t.Errorf("the report lacks %q:\n%s", line, out.String())
				}
			}
		})
	}
}

// An upgrade's report shows each database's schema after the upgrade beside blue's before it,
// from the latest reading (the shift's, then finalize's), by table and column.
func TestReportShowsSchemasAcrossTheUpgrade(t *testing.T) {
	ctx := context.Background()
	j, err := CreateJournal(ctx, fileStore(t), Run{ID: NewID(time.Now()), Backup: "b1", Upgrade: &plans.UpgradeOptions{}})
	if err != nil {
		t.Fatal(err)
	}
	unchanged := schemaRecord{Schemas: []snapshot.SchemaChange{{Database: "kubeflow/mysql", Engine: "mysql", After: "green at the shift", TablesBefore: 2, TablesAfter: 2}}}
	migrated := schemaRecord{Schemas: []snapshot.SchemaChange{{Database: "kubeflow/mysql", Engine: "mysql", After: "green at finalize", TablesBefore: 2, TablesAfter: 3,
		Tables: []snapshot.TableChange{{Table: "mlpipeline.schema_version", Added: true, Columns: []snapshot.Column{{Name: "version", Type: "int(11)"}}}},
		Columns: []snapshot.ColumnChange{{Table: "mlpipeline.run_details", Column: "state", After: "varchar(32)"},
			{Table: "mlpipeline.run_details", Column: "score", Before: "float", After: "double"}}}}}
	for _, step := range []struct {
		state State
		rec   schemaRecord
		want  []string
	}{
		{Shifted, unchanged, []string{"DATABASE SCHEMAS (before: blue, in the run's backup)", "  mysql kubeflow/mysql, after: green at the shift", "    2 tables, unchanged"}},
		{Finalized, migrated, []string{"  mysql kubeflow/mysql, after: green at finalize", "    2 tables before, 3 after",
			"    table added    mlpipeline.schema_version (version int(11))", "    column added   mlpipeline.run_details.state varchar(32)",
			"    column retyped mlpipeline.run_details.score float -> double"}},
	} {
		data, _ := json.Marshal(step.rec)
		for _, phase := range []string{Begin, Done} {
			e := Event{State: step.state, Phase: phase}
			if phase == Done {
				e.Data = data
			}
			if _, err := j.Append(ctx, e); err != nil {
				t.Fatal(err)
			}
		}
		var out strings.Builder
		if err := ReadReport(ctx, j).Print(&out); err != nil {
			t.Fatal(err)
		}
		for _, line := range step.want {
			if !strings.Contains(out.String(), line+"\n") {
				t.Errorf("after %s, the report lacks %q:\n%s", step.state, line, out.String())
			}
		}
	}
}

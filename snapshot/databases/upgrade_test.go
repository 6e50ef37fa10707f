package databases

import (
	"slices"
	"strings"
	"testing"

	"github.com/ferrykube/ferry/snapshot"
)

func cols(nameTypes ...string) []snapshot.Column {
	var out []snapshot.Column
	for _, nt := range nameTypes {
		n, t, _ := strings.Cut(nt, " ")
		out = append(out, snapshot.Column{Name: n, Type: t})
	}
	return out
}

func shapeOf(key []string, nameTypes ...string) *shape {
	s := &shape{Key: key}
	for _, c := range cols(nameTypes...) {
		s.Columns = append(s.Columns, column{Column: c})
	}
	return s
}

func TestPlanUpgradeCompare(t *testing.T) {
	dumped := snapshot.Table{Schema: "mlpipeline", Name: "runs", Rows: 3, Key: []string{"id"}, Columns: cols("id int(11)", "name varchar(64)", "score double")}
	keyless := snapshot.Table{Schema: "mlpipeline", Name: "events", Rows: 3, Columns: cols("run int(11)", "kind varchar(16)")}
	for _, tc := range []struct {
		name      string
		table     snapshot.Table
		target    *shape
		missing   bool
		problems  []string
		compared  []string // the columns whose values are compared; nil: rows not compared
		key       []string
		typeNotes int
	}{
		{"same", dumped, shapeOf([]string{"id"}, "id int(11)", "name varchar(64)", "score double"), false, nil, []string{"id", "name", "score"}, []string{"id"}, 0},
		{"columns and a key added", dumped, shapeOf([]string{"id", "tenant"}, "tenant int(11)", "id int(11)", "extra text", "name varchar(64)", "score double"), false, nil, []string{"id", "name", "score"}, []string{"id"}, 0},
		{"a column dropped", dumped, shapeOf([]string{"id"}, "id int(11)", "name varchar(64)"), false, []string{"column score (double): not on the target"}, []string{"id", "name"}, []string{"id"}, 0},
		{"a type widened", dumped, shapeOf([]string{"id"}, "id bigint(20)", "name varchar(255)", "score double"), false, nil, []string{"id", "name", "score"}, []string{"id"}, 2},
		{"the key column dropped", dumped, shapeOf(nil, "uuid char(36)", "name varchar(64)", "score double"), false,
			[]string{"column id (int(11)): not on the target", "rows not compared: their primary key column(s) id are not on the target"}, nil, nil, 0},
		{"the table dropped", dumped, nil, true, nil, nil, nil, 0},
		{"no primary key", keyless, shapeOf(nil, "run int(11)", "kind varchar(16)", "at datetime"), false, nil, []string{"run", "kind"}, []string{"run", "kind"}, 0},
		{"no primary key, a column dropped", keyless, shapeOf(nil, "run int(11)"), false,
			[]string{"column kind (varchar(16)): not on the target", "rows not compared: their values (the table has no primary key) column(s) kind are not on the target"}, nil, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := planUpgradeCompare(tc.table, tc.target, false)
			if p.missing != tc.missing || !slices.Equal(p.problems, tc.problems) || len(p.changed) != tc.typeNotes {
				t.Fatalf("missing %v, problems %q, type changes %v; want %v, %q, %d", p.missing, p.problems, p.changed, tc.missing, tc.problems, tc.typeNotes)
			}
			if tc.compared == nil {
				if p.query != nil {
					t.Fatalf("rows compared by %+v, want not compared", *p.query)
				}
				return
			}
			if p.query == nil || !slices.Equal(p.query.columns, tc.compared) || !slices.Equal(p.query.key, tc.key) || len(p.shared) != len(tc.compared) {
				t.Fatalf("query %+v shared %v, want columns %v key %v", p.query, p.shared, tc.compared, tc.key)
			}
		})
	}
}

// digestStream writes a digest stream of one table.
func digestStream(table string, rows ...string) string {
	return "table\tdb\t" + table + "\n" + strings.Join(rows, "\n") + "\n"
}

// TestPlanCarriedBackCompare: a carry-back's verify holds blue (the older release) to green's
// backup on the columns both have; green's newer column is what the carry-back left and listed.
func TestPlanCarriedBackCompare(t *testing.T) {
	dumped := snapshot.Table{Schema: "mlpipeline", Name: "run_details", Rows: 3, Key: []string{"id"}, Columns: cols("id int(11)", "name varchar(64)", "state varchar(32)")}
	p := planUpgradeCompare(dumped, shapeOf([]string{"id"}, "id int(11)", "name varchar(64)"), true)
	if len(p.problems) > 0 || p.missing || p.query == nil || !slices.Equal(p.query.columns, []string{"id", "name"}) {
		t.Errorf("problems %q, missing %v, query %+v; want the rows compared on id and name", p.problems, p.missing, p.query)
	}
	if p := planUpgradeCompare(dumped, shapeOf([]string{"id"}, "id int(11)", "name varchar(64)"), false); len(p.problems) != 1 {
		t.Errorf("after an upgrade, a dropped column is a difference: %q", p.problems)
	}
}

func TestCompareRows(t *testing.T) {
	dumped := snapshot.Table{Schema: "db", Name: "runs", Rows: 3, Key: []string{"id"}, Columns: cols("id int", "name text", "score double")}
	full := planUpgradeCompare(dumped, shapeOf([]string{"id"}, "id int", "name text", "score double", "added text"), false)
	noScore := planUpgradeCompare(dumped, shapeOf([]string{"id"}, "id int", "name text"), false)
	keyless := snapshot.Table{Schema: "db", Name: "runs", Rows: 3, Columns: cols("run int", "kind text")}
	keylessPlan := planUpgradeCompare(keyless, shapeOf(nil, "run int", "kind text"), false)
	backup := digestStream("runs", "1a\ti1\tn1\ts1", "2b\ti2\tn2\ts2", "3c\ti3\tn3\ts3")
	for _, tc := range []struct {
		name           string
		plan           tablePlan
		backup, target string
		problems       []string
		err            string
	}{
		{"the same rows", full, backup, digestStream("runs", "1a\ti1\tn1\ts1", "2b\ti2\tn2\ts2", "3c\ti3\tn3\ts3"), nil, ""},
		{"rows added before, between and after", full, backup, digestStream("runs", "0f\tx\ty\tz", "1a\ti1\tn1\ts1", "2b\ti2\tn2\ts2", "2c\tx\ty\tz", "3c\ti3\tn3\ts3", "ff\tx\ty\tz"), nil, ""},
		{"a row deleted", full, backup, digestStream("runs", "1a\ti1\tn1\ts1", "3c\ti3\tn3\ts3"),
			[]string{"1 of the backup's 3 rows are not on the target (rows matched by primary key (id))"}, ""},
		{"a value changed", full, backup, digestStream("runs", "1a\ti1\tn1\ts1", "2b\ti2\tCHANGED\ts2", "3c\ti3\tn3\ts3"),
			[]string{"column name: 1 of the backup's rows have another value on the target"}, ""},
		{"a dropped column is not compared", noScore, backup, digestStream("runs", "1a\ti1\tn1", "2b\ti2\tn2", "3c\ti3\tn3"), nil, ""},
		{"an empty target table", full, backup, digestStream("runs"),
			[]string{"3 of the backup's 3 rows are not on the target (rows matched by primary key (id))"}, ""},
		{"equal rows without a key, one gone", keylessPlan, digestStream("runs", "aa\t1\tstart", "aa\t1\tstart", "bb\t2\tend"), digestStream("runs", "aa\t1\tstart", "bb\t2\tend", "cc\t3\tnew"),
			[]string{"1 of the backup's 3 rows are not on the target (rows matched by all their values (the table has no primary key))"}, ""},
		{"the target out of order", full, backup, digestStream("runs", "2b\ti2\tn2\ts2", "1a\ti1\tn1\ts1", "3c\ti3\tn3\ts3"), nil, "target's digests are not in key order"},
		{"a malformed row", full, backup, digestStream("runs", "1a\ti1\tn1"), nil, "has 2 values, want 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, tg := newDigestReader(strings.NewReader(tc.backup)), newDigestReader(strings.NewReader(tc.target))
			if err := d.table("db", "runs"); err != nil {
				t.Fatal(err)
			}
			if err := tg.table("db", "runs"); err != nil {
				t.Fatal(err)
			}
			res, err := compareRows(tc.plan, d, tg)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := rowProblems(tc.plan, res); !slices.Equal(got, tc.problems) {
				t.Fatalf("problems %q, want %q", got, tc.problems)
			}
		})
	}
}

func TestRowProblemsNameATypeChange(t *testing.T) {
	dumped := snapshot.Table{Schema: "db", Name: "runs", Key: []string{"id"}, Columns: cols("id int", "at datetime")}
	p := planUpgradeCompare(dumped, shapeOf([]string{"id"}, "id int", "at datetime(6)"), false)
	got := rowProblems(p, rowsCompared{rows: 2, differ: []int64{0, 2}})
	want := []string{"column at (type datetime in the backup, datetime(6) on the target): 2 of the backup's rows have another value as text: not comparable across the type change"}
	if !slices.Equal(got, want) {
		t.Fatalf("problems %q, want %q", got, want)
	}
}

func TestDigestSQL(t *testing.T) {
	q := digestQuery{schema: "app.public", name: `we"ird`, key: []string{"id"}, columns: []string{"id", "note"}}
	pg := digestSQL(true, q)
	for _, want := range []string{`FROM "public"."we""ird" t`, `md5(t."note"::text)`, `COLLATE "C"`, `SELECT 'table', 'app.public', 'we"ird';`} {
		if !strings.Contains(pg, want) {
			t.Errorf("PostgreSQL digest SQL lacks %s:\n%s", want, pg)
		}
	}
	my := digestSQL(false, digestQuery{schema: "mlpipeline", name: "run`s", key: []string{"a", "b"}, columns: []string{"a"}})
	for _, want := range []string{"FROM `mlpipeline`.`run``s` t", "COALESCE(MD5(`a`), '-'), COALESCE(MD5(`b`), '-')", "ORDER BY 1"} {
		if !strings.Contains(my, want) {
			t.Errorf("MySQL digest SQL lacks %s:\n%s", want, my)
		}
	}
}

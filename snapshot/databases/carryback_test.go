package databases

import (
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/ferrykube/ferry/snapshot"
)

func TestPlanCarryBack(t *testing.T) {
	col := func(name string, notNull, filled, generated bool) column {
		return column{Column: snapshot.Column{Name: name, Type: "int"}, NotNull: notNull, Filled: filled, Generated: generated}
	}
	green := map[string]*shape{
		tableKey("kfp", "runs"):    {Schema: "kfp", Name: "runs", Columns: []column{col("id", true, false, false), col("name", true, false, false), col("owner", true, true, false)}},
		tableKey("kfp", "metrics"): {Schema: "kfp", Name: "metrics", Columns: []column{col("run", true, false, false)}},
		tableKey("kfp", "flags"):   {Schema: "kfp", Name: "flags", Columns: []column{col("id", true, false, false)}},
		tableKey("kfp", "empty"):   {Schema: "kfp", Name: "empty", Columns: []column{col("id", true, false, false)}},
	}
	blue := map[string]*shape{
		tableKey("kfp", "runs"):  {Schema: "kfp", Name: "runs", Columns: []column{col("id", true, false, false), col("name", true, false, false), col("upper_name", false, true, true), col("legacy", false, false, false)}},
		tableKey("kfp", "flags"): {Schema: "kfp", Name: "flags", Columns: []column{col("id", true, false, false), col("must", true, false, false), col("dflt", true, true, false)}},
		tableKey("kfp", "empty"): {Schema: "kfp", Name: "empty", Columns: []column{col("id", true, false, false), col("must", true, false, false)}},
		tableKey("kfp", "old"):   {Schema: "kfp", Name: "old", Columns: []column{col("id", true, false, false)}},
		tableKey("kfp", "older"): {Schema: "kfp", Name: "older", Columns: []column{col("id", true, false, false)}},
	}
	d := snapshot.Database{Name: "kfp-mysql", Tables: []snapshot.Table{
		{Schema: "kfp", Name: "empty", Rows: 0}, {Schema: "kfp", Name: "flags", Rows: 2}, {Schema: "kfp", Name: "metrics", Rows: 5}, {Schema: "kfp", Name: "runs", Rows: 3}}}
	p := planCarryBack(d, green, blue)
	var copies []string
	for _, c := range p.copies {
		copies = append(copies, c.schema+"."+c.name+"("+strings.Join(c.columns, ",")+")")
	}
	if want := []string{"kfp.empty(id)", "kfp.runs(id,name)"}; !slices.Equal(copies, want) {
		t.Errorf("copies %v, want %v", copies, want)
	}
	if want := []tableNote{{"kfp.flags", "column must is NOT NULL without a default on the target and the backup's table has no such column: its 2 rows cannot be represented"}}; !slices.Equal(p.refused, want) {
		t.Errorf("refused %q, want %q", p.refused, want)
	}
	want := []tableNote{
		{"kfp.metrics", "only in the backup (5 rows), not on the target: left, not carried back"},
		{"kfp.runs", "columns only in the backup, their values not carried back: owner"},
		{"kfp.old", "not in the backup: left as it is on the target"},
		{"kfp.older", "not in the backup: left as it is on the target"},
	}
	if !slices.Equal(p.left, want) {
		t.Errorf("left %q, want %q", p.left, want)
	}

	// A partitioned table of blue's is carried back by its partitions' rows.
	green[tableKey("kfp", "runs")].Partitioned = true
	blue[tableKey("kfp", "runs")].Partitioned = true
	for _, c := range planCarryBack(d, green, blue).copies {
		if c.partitioned != (c.name == "runs") {
			t.Errorf("copy of %s: partitioned %v", c.name, c.partitioned)
		}
	}
}

func TestSwapSQLNamesEachLinesTable(t *testing.T) {
	sql, tables := swapSQL([]tableCopy{{schema: "kfp", name: "runs", columns: []string{"id", "na`me"}}}, map[string]string{"kfp": "ferry_stage_kfp"}, nil)
	lines := strings.Split(sql, "\n")
	if len(lines) != len(tables) || tables[4] != "kfp.runs" || tables[len(tables)-1] != "" {
		t.Fatalf("lines %q tables %q", lines, tables)
	}
	if want := "INSERT INTO `kfp`.`runs` (`id`, `na``me`) SELECT `id`, `na``me` FROM `ferry_stage_kfp`.`runs`;"; lines[4] != want {
		t.Fatalf("line 5 %q, want %q", lines[4], want)
	}
	if lines[2] != "START TRANSACTION;" || lines[len(lines)-1] != "COMMIT;" || !strings.HasPrefix(lines[3], "DELETE FROM `kfp`.`runs`") {
		t.Fatalf("not one transaction replacing the rows: %q", lines)
	}
}

func TestPgCopyLines(t *testing.T) {
	m := pgCopyRE.FindStringSubmatch(`COPY "we.ird"."Tab le" (id, "na,me", age) FROM stdin;`)
	if m == nil {
		t.Fatal("a COPY with quoted names is not recognised")
	}
	if nsp, table := splitPgTable(m[1]); nsp != "we.ird" || table != "Tab le" {
		t.Fatalf("table %q.%q", nsp, table)
	}
	if m := pgCopyRE.FindStringSubmatch(`COPY public.users (id, email) FROM stdin;`); m == nil || m[2] != "id, email" {
		t.Fatalf("columns %q", m)
	}
	var out strings.Builder
	pr, pw := io.Pipe()
	copied := make(chan struct{})
	go func() { io.Copy(&out, pr); close(copied) }()
	s := &pgSession{w: pw}
	var line []byte
	// A row in two pieces, an escaped tab inside a value: fields 2 and 0 kept, in that order.
	if err := projectRow(s, []byte("1\tx\\ty"), true, []int{2, 0}, &line); err != nil {
		t.Fatal(err)
	}
	if err := projectRow(s, []byte("z\t\\N"), false, []int{2, 0}, &line); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	<-copied
	if s.lines != 1 || out.String() != "\\N\t1\n" {
		t.Fatalf("%d lines written: %q", s.lines, out.String())
	}
}

// TestPgLargeObjectStatements: the statements of pg_dump that make, own, grant, describe and
// write a large object run in a carry-back; nothing else of the dump does, the BEGIN and COMMIT
// around the large objects' contents neither.
func TestPgLargeObjectStatements(t *testing.T) {
	for _, tc := range []struct {
		line string
		runs bool
	}{
		{`SELECT pg_catalog.lo_create('16390');`, true},
		{`ALTER LARGE OBJECT 16390 OWNER TO app;`, true},
		{`ALTER LARGE OBJECT 16390 OWNER TO "App Owner";`, true},
		{`GRANT SELECT ON LARGE OBJECT 16390 TO reader;`, true},
		{`REVOKE ALL ON LARGE OBJECT 16390 FROM PUBLIC;`, true},
		{`COMMENT ON LARGE OBJECT 16390 IS 'the model';`, true},
		{`SELECT pg_catalog.lo_open('16390', 131072);`, true},
		{`SELECT pg_catalog.lowrite(0, '\x68656c6c6f');`, true},
		{`SELECT pg_catalog.lowrite(0, '\x');`, true},
		{`SELECT pg_catalog.lo_close(0);`, true},
		{`BEGIN;`, false},
		{`COMMIT;`, false},
		{`SELECT pg_catalog.set_config('search_path', '', false);`, false},
		{`SELECT pg_catalog.lo_unlink(oid) FROM pg_catalog.pg_largeobject_metadata WHERE oid = '16390';`, false},
		{`SELECT pg_catalog.lowrite(0, '\x00'); DROP TABLE users;`, false},
		{`SELECT pg_catalog.lo_create('16390'); DROP TABLE users;`, false},
		{`DROP DATABASE app;`, false},
		{`SELECT pg_catalog.lowrite(0, '\\x6869');`, true}, // standard_conforming_strings off
		{`GRANT SELECT,UPDATE ON LARGE OBJECT 16390 TO "Read Er", app WITH GRANT OPTION;`, true},
		{`REVOKE GRANT OPTION FOR SELECT ON LARGE OBJECT 16390 FROM PUBLIC;`, true},
		{`COMMENT ON LARGE OBJECT 16390 IS 'it''s the model';`, true},
		{`GRANT SELECT ON TABLE public."t ON LARGE OBJECT 1 TO x" TO bob;`, false},
		{`REVOKE ALL ON SCHEMA public FROM x ON LARGE OBJECT 1 FROM y;`, false},
		{`COMMENT ON LARGE OBJECT 16390 IS 'a'; DROP TABLE users; --';`, false},
	} {
		if got := pgLargeObjectRE.MatchString(tc.line); got != tc.runs {
			t.Errorf("%q runs: %v, want %v", tc.line, got, tc.runs)
		}
	}
	// What is about large objects but not taken stops the carry-back; other statements are
	// only left out.
	for line, about := range map[string]bool{
		`SELECT pg_catalog.lo_unlink('16390');`:                    true,
		`COMMENT ON LARGE OBJECT 16390 IS 'two`:                    true,
		`SECURITY LABEL FOR selinux ON LARGE OBJECT 16390 IS 'x';`: true,
		`-- Name: LARGE OBJECT 16390; Type: COMMENT; Schema: -`:    false,
		`SELECT pg_catalog.set_config('search_path', '', false);`:  false,
		`BEGIN;`: false,
	} {
		if got := pgLargeObjectStatement([]byte(line)); got != about {
			t.Errorf("%q is about large objects: %v, want %v", line, got, about)
		}
	}
}

// TestPgSetval: a sequence's value goes to blue's sequence of that name, and only when blue has
// one.
func TestPgSetval(t *testing.T) {
	for _, tc := range []struct{ line, want string }{
		{`SELECT pg_catalog.setval('public.events_id_seq', 12, true);`,
			`SELECT pg_catalog.setval(s, 12, true) FROM pg_catalog.to_regclass('public.events_id_seq') s WHERE s IS NOT NULL;` + "\n"},
		{`SELECT pg_catalog.setval('"We''ird"."Seq"', 1, false);`,
			`SELECT pg_catalog.setval(s, 1, false) FROM pg_catalog.to_regclass('"We''ird"."Seq"') s WHERE s IS NOT NULL;` + "\n"},
		{`SELECT pg_catalog.setval('public.s', 1, true); DROP TABLE users;`, ""},
		{`SELECT pg_catalog.setval('public.s', 1, true) FROM users;`, ""},
	} {
		got := ""
		if m := pgSetvalRE.FindStringSubmatch(tc.line); m != nil {
			got = pgSetval(m)
		}
		if got != tc.want {
			t.Errorf("%q carried back as %q, want %q", tc.line, got, tc.want)
		}
	}
}

// TestDeferForeignKeys: a foreign key waits for the end of a PostgreSQL carry-back only when the
// dump writes its table's rows before those of the table it references, both carried back, and is
// made deferrable when it is not; the tables are emptied together (a partitioned one with its
// partitions), but one a table left as it is references, and those it references, which are
// deleted, each before those it references; triggers are off until the end, and then fire as
// they did.
func TestDeferForeignKeys(t *testing.T) {
	fk := func(name, schema, table string, deferrable bool) foreignKey {
		return foreignKey{Name: name, ParentSchema: schema, ParentName: table, Deferrable: deferrable, OnDelete: "a"}
	}
	blue := map[string]*shape{
		tableKey("app.public", "orders"): {ForeignKeys: []foreignKey{fk("orders_user", "app.public", "users", false), fk("orders_lazy", "app.public", "users", true),
			fk("orders_left", "app.public", "zones", false)}},
		tableKey("app.public", "users"):  {ForeignKeys: []foreignKey{fk("users_boss", "app.public", "users", false), fk("users_dept", "app.billing", "depts", false)}},
		tableKey("app.billing", "depts"): {},
		tableKey("app.billing", "notes"): {ForeignKeys: []foreignKey{fk("notes_user", "app.public", "users", false)}}, // left as it is
		tableKey("app.public", "zones"):  {},
	}
	named := func(shapes map[string]*shape) map[string]*shape {
		for key, sh := range shapes {
			sh.Schema, sh.Name, _ = strings.Cut(key, "\x00")
		}
		return shapes
	}
	named(blue)
	copies := []tableCopy{{schema: "app.billing", name: "depts"}, {schema: "app.public", name: "orders"},
		{schema: "app.public", name: "users", triggers: []trigger{{"audit", "O"}, {"always", "A"}}},
		{schema: "app.public", name: "metrics", partitioned: true}}
	if refused := deferForeignKeys(copies, blue); len(refused) > 0 {
		t.Fatalf("refused %v", refused)
	}
	for _, c := range copies {
		want := map[string][]constraintOf{"orders": {{"app.public", "orders", "orders_user"}}, "users": {{"app.billing", "notes", "notes_user"}}}[c.name]
		if !slices.Equal(c.deferred, want) || c.waits != (c.name == "orders" || c.name == "users") {
			t.Errorf("%s defers %v (waits %v), want %v", c.name, c.deferred, c.waits, want)
		}
	}
	begin := `ALTER TABLE "public"."orders" ALTER CONSTRAINT "orders_user" DEFERRABLE;
ALTER TABLE "public"."users" DISABLE TRIGGER "audit";
ALTER TABLE "public"."users" DISABLE TRIGGER "always";
ALTER TABLE "billing"."notes" ALTER CONSTRAINT "notes_user" DEFERRABLE;
SET CONSTRAINTS ALL DEFERRED;
TRUNCATE "public"."orders", "public"."metrics";
DELETE FROM "public"."users";
DELETE FROM "billing"."depts";
`
	if got := pgBegin(copies); got != begin {
		t.Errorf("begin:\n%s\nwant\n%s", got, begin)
	}
	end := `SET CONSTRAINTS ALL IMMEDIATE;
ALTER TABLE "public"."orders" ALTER CONSTRAINT "orders_user" NOT DEFERRABLE;
ALTER TABLE "billing"."notes" ALTER CONSTRAINT "notes_user" NOT DEFERRABLE;
ALTER TABLE "public"."users" ENABLE TRIGGER "audit";
ALTER TABLE "public"."users" ENABLE ALWAYS TRIGGER "always";
`
	if got := pgEnd(copies); got != end {
		t.Errorf("end:\n%s\nwant\n%s", got, end)
	}
	// A table left as it is whose rows would go (or change) with the copy's: refused.
	cascade := fk("notes_user", "app.public", "users", false)
	cascade.OnDelete = "c"
	blue[tableKey("app.billing", "notes")].ForeignKeys = []foreignKey{cascade}
	refused := deferForeignKeys([]tableCopy{{schema: "app.public", name: "users"}}, blue)
	if len(refused) != 1 || refused[0].table != "app.public.users" || !strings.Contains(refused[0].detail, "table app.billing.notes") {
		t.Errorf("refused %v, want users for app.billing.notes", refused)
	}
	// A key that may be deferred already is deferred, not altered.
	lazy := []tableCopy{{schema: "app.public", name: "orders"}, {schema: "app.public", name: "users"}}
	deferForeignKeys(lazy, named(map[string]*shape{tableKey("app.public", "orders"): {ForeignKeys: []foreignKey{fk("orders_lazy", "app.public", "users", true)}}}))
	if got, want := pgBegin(lazy), "SET CONSTRAINTS ALL DEFERRED;\nTRUNCATE \"public\".\"orders\", \"public\".\"users\";\n"; got != want {
		t.Errorf("begin with a deferrable key: %q, want %q", got, want)
	}
}

// TestSwapSQLTakesTriggersOff: blue's triggers on the replaced tables are kept in a table with a
// primary key and dropped, waiting a minute at most for each table's lock, before the
// transaction; each statement on a line of its own.
func TestSwapSQLTakesTriggersOff(t *testing.T) {
	copies := []tableCopy{{schema: "shop", name: "orders", columns: []string{"id"}}, {schema: "shop", name: "audit", columns: []string{"id"}}}
	triggers := []mysqlTrigger{{schema: "shop", name: "orders_audit", table: "orders"}, {schema: "shop", name: "o`dd", table: "orders"}}
	sql, tables := swapSQL(copies, map[string]string{"shop": "ferry_stage_shop"}, triggers)
	lines := strings.Split(sql, "\n")
	if len(lines) != len(tables) {
		t.Fatalf("%d lines, %d tables", len(lines), len(tables))
	}
	want := []string{
		"CREATE DATABASE IF NOT EXISTS `ferry_stage_triggers`;",
		createKeptTriggers[strings.Index(createKeptTriggers, "\n")+1:],
		"REPLACE INTO `ferry_stage_triggers`.`kept` (" + triggerColumns + ") SELECT " + triggerColumns + " FROM information_schema.TRIGGERS WHERE " +
			"(EVENT_OBJECT_SCHEMA = 'shop' AND EVENT_OBJECT_TABLE = 'orders') OR (EVENT_OBJECT_SCHEMA = 'shop' AND EVENT_OBJECT_TABLE = 'audit');",
		"SET SESSION lock_wait_timeout = 60;",
		"DROP TRIGGER `shop`.`orders_audit`;",
		"DROP TRIGGER `shop`.`o``dd`;",
		"START TRANSACTION;",
	}
	if got := lines[2 : 2+len(want)]; !slices.Equal(got, want) {
		t.Fatalf("lines 3 to %d:\n%s\nwant\n%s", 2+len(want), strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if tables[2+len(want)] != "shop.orders" || tables[2] != "" || lines[len(lines)-1] != "COMMIT;" {
		t.Fatalf("tables %q, last line %q", tables, lines[len(lines)-1])
	}
}

func TestMakeTriggersSQL(t *testing.T) {
	for _, c := range []struct {
		name string
		tr   mysqlTrigger
		want []string
	}{
		{"one statement, an account", mysqlTrigger{schema: "shop", name: "orders_audit", table: "orders", timing: "AFTER", event: "INSERT",
			statement: "INSERT INTO audit (order_id) VALUES (NEW.id)", sqlMode: "STRICT_TRANS_TABLES", definer: "app@%", charset: "utf8mb4", collation: "utf8mb4_general_ci"},
			[]string{"SET SESSION sql_mode = 'STRICT_TRANS_TABLES';", "SET SESSION character_set_client = 'utf8mb4';", "SET SESSION collation_connection = 'utf8mb4_general_ci';",
				"DROP TRIGGER IF EXISTS `shop`.`orders_audit`;", "DELIMITER $$ferry$$",
				"CREATE DEFINER=`app`@`%` TRIGGER `shop`.`orders_audit` AFTER INSERT ON `shop`.`orders` FOR EACH ROW INSERT INTO audit (order_id) VALUES (NEW.id)$$ferry$$",
				"DELIMITER ;", ""}},
		{"a body of statements holding the delimiter, a user with @ in its name, latin1 and non-ASCII", mysqlTrigger{schema: "s", name: "t", table: "x", timing: "BEFORE", event: "UPDATE",
			statement: "BEGIN\n  SET NEW.note = 'é$$ferry$$';\nEND", definer: "a@b@localhost", charset: "latin1", collation: "latin1_swedish_ci"},
			[]string{"SET SESSION sql_mode = '';", "SET SESSION character_set_client = 'utf8mb4';", "SET SESSION collation_connection = 'utf8mb4_general_ci';",
				"DROP TRIGGER IF EXISTS `s`.`t`;", "DELIMITER $$ferry0$$",
				"CREATE DEFINER=`a@b`@`localhost` TRIGGER `s`.`t` BEFORE UPDATE ON `s`.`x` FOR EACH ROW BEGIN", "  SET NEW.note = 'é$$ferry$$';", "END$$ferry0$$",
				"DELIMITER ;", ""}},
		{"latin1 with an ASCII body keeps it; a role", mysqlTrigger{schema: "s", name: "t", table: "x", timing: "AFTER", event: "DELETE",
			statement: "DELETE FROM y", definer: "auditor", charset: "latin1", collation: "latin1_swedish_ci"},
			[]string{"SET SESSION sql_mode = '';", "SET SESSION character_set_client = 'latin1';", "SET SESSION collation_connection = 'latin1_swedish_ci';",
				"DROP TRIGGER IF EXISTS `s`.`t`;", "DELIMITER $$ferry$$",
				"CREATE DEFINER=`auditor` TRIGGER `s`.`t` AFTER DELETE ON `s`.`x` FOR EACH ROW DELETE FROM y$$ferry$$",
				"DELIMITER ;", ""}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := strings.Split(makeTriggersSQL([]mysqlTrigger{c.tr}), "\n"); !slices.Equal(got, c.want) {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(c.want, "\n"))
			}
		})
	}
}

// TestSwapSQLKeepsRowZero: the carry-back's INSERT ... SELECT runs with NO_AUTO_VALUE_ON_ZERO, as
// mysqldump's load does, so that an AUTO_INCREMENT row numbered 0 keeps its number.
func TestSwapSQLKeepsRowZero(t *testing.T) {
	sql, _ := swapSQL([]tableCopy{{schema: "kfp", name: "kinds", columns: []string{"id"}}}, map[string]string{"kfp": "ferry_stage_kfp"}, nil)
	first, _, _ := strings.Cut(sql, "\n")
	for _, mode := range []string{"NO_AUTO_VALUE_ON_ZERO", "STRICT_ALL_TABLES"} {
		if !strings.HasPrefix(first, "SET SESSION sql_mode = ") || !strings.Contains(first, mode) {
			t.Errorf("the swap's first line %q does not set %s", first, mode)
		}
	}
}

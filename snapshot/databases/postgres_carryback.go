package databases

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ferrykube/ferry/internal/kube"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/klauspost/compress/zstd"
)

// A PostgreSQL carry-back needs no staging: pg_dump writes each table's rows as COPY text, one row
// a line, its columns named in the COPY statement and separated by tabs (a tab in a value is
// written \t). The dump is read once more after its check. Each database's transaction first
// empties the tables both have, before any rows come (pgBegin: a DELETE of one table as its rows
// came would cascade into another already carried back, through blue's foreign keys); each of
// them is then sent to blue as "COPY t (shared columns) FROM stdin;" with its rows cut down to the
// shared columns. Until the end (pgEnd) blue's triggers on those tables are off, as pg_dump's are
// made after the rows, and blue's foreign keys that the dump's order of rows would break are
// deferred; they are checked then. Of the rest of the dump, only the values of the sequences blue
// has (pgSetvalRE) and the large objects (pgLargeObjectRE) are carried back. Each database of the
// dump gets its own psql session and transaction; all are held open until every one has taken its
// rows, then committed one after the other (a failure in between leaves those committed before
// it: the report says which).

// Large objects live in no table: pg_dump makes each one (lo_create), gives it its owner,
// grants and comment, and writes its contents (lo_open, lowrite, lo_close) in statements of
// their own. A carry-back makes blue's large objects green's, as it makes the shared tables'
// rows green's: in each database's transaction, blue's are unlinked first (pgUnlinkLargeObjects)
// and these statements of the dump run as they are, with the dump's setting of how a string
// literal reads a backslash (pgStringsRE); rows that point at a large object by its oid find it,
// with green's contents. The dump's BEGIN and COMMIT around the contents do not run. Any other
// statement on a large object stops the carry-back before anything is committed: one left out
// would lose green's large object.
var pgLargeObjectRE = regexp.MustCompile(`^(?:SELECT pg_catalog\.(?:lo_create\('\d+'\)|lo_open\('\d+', \d+\)|lowrite\(0, '\\{1,2}x[0-9a-f]*'\)|lo_close\(0\))` +
	`|ALTER LARGE OBJECT \d+ OWNER TO ` + pgRole +
	`|(?:GRANT|REVOKE) [A-Z, ]+ ON LARGE OBJECT \d+ (?:TO|FROM) ` + pgRole + `(?:, ` + pgRole + `)*(?: WITH GRANT OPTION)?` +
	`|COMMENT ON LARGE OBJECT \d+ IS '(?:[^']|'')*');$`)

// pgRole is a role as pg_dump names it: quoted but for lower-case ones.
const pgRole = `(?:"(?:[^"]|"")+"|[a-z_][a-z0-9_$]*|PUBLIC)`

// pgStringsRE is the dump's setting of standard_conforming_strings, which says how its large
// objects' contents read.
var pgStringsRE = regexp.MustCompile(`^SET standard_conforming_strings = (?:on|off);$`)

// pgLargeObjectStatement says whether a statement of the dump, not one pgLargeObjectRE takes,
// is about large objects.
func pgLargeObjectStatement(line []byte) bool {
	return bytes.HasPrefix(line, []byte("SELECT pg_catalog.lo")) || !bytes.HasPrefix(line, []byte("--")) && bytes.Contains(line, []byte(" LARGE OBJECT "))
}

// pgLockTimeout bounds each wait for a lock: emptying and altering a table waits for every
// session that reads it (one of blue's left open, idle in a transaction, would hold the
// carry-back forever); a carry-back that waited too long fails, nothing committed.
const pgLockTimeout = "SET LOCAL lock_timeout = '60s';\n"

// pgUnlinkLargeObjects ends a session's output of query results, which the large objects'
// statements print and nothing reads (the markers of \echo still come), and unlinks every large
// object of the database.
const pgUnlinkLargeObjects = "\\o /dev/null\nSELECT count(pg_catalog.lo_unlink(oid)) FROM pg_catalog.pg_largeobject_metadata;\n"

// pgSetvalRE is pg_dump's statement that sets a sequence where the source's is: its name as a
// string, its value and whether that value was taken. A carry-back sets blue's sequence of that
// name (one of green's only is left, with its table) to green's value, or blue's application would
// take numbers green's rows already hold, and its next insert would fail. A sequence's value is
// not rolled back with a transaction: they are set just before the commit, once every database
// took its rows.
var pgSetvalRE = regexp.MustCompile(`^SELECT pg_catalog\.setval\(('(?:[^']|'')+'), (-?\d+), (true|false)\);$`)

// pgSetval is the statement that sets blue's sequence, when blue has it, as m (pgSetvalRE) sets it.
func pgSetval(m []string) string {
	return "SELECT pg_catalog.setval(s, " + m[2] + ", " + m[3] + ") FROM pg_catalog.to_regclass(" + m[1] + ") s WHERE s IS NOT NULL;\n"
}

// pgCopyRE is a COPY statement of pg_dump: its table and its columns.
var pgCopyRE = regexp.MustCompile(`^COPY ((?:"(?:[^"]|"")+"|[^\s.(]+)\.(?:"(?:[^"]|"")+"|[^\s(]+)) \(([^)]*)\) FROM stdin;$`)

// pgName unquotes a PostgreSQL identifier as pg_dump writes it.
func pgName(s string) string {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, `"`) && strings.HasSuffix(s, `"`) && len(s) >= 2 {
		return strings.ReplaceAll(s[1:len(s)-1], `""`, `"`)
	}
	return s
}

// splitPgTable splits "schema.table" as pg_dump writes it.
func splitPgTable(s string) (string, string) {
	sc := newSQLScanner("postgresql")
	for i := 0; i < len(s); i++ {
		if s[i] == '.' && sc.state == stNormal {
			return pgName(s[:i]), pgName(s[i+1:])
		}
		sc.byte(s[i])
	}
	return "", pgName(s)
}

// pgSession is one psql session on one of blue's databases, its transaction open.
type pgSession struct {
	db     string
	w      *io.PipeWriter
	lines  int64 // written, for the table a psql error names
	ranges []lineRange
	// setvals set blue's sequences, just before the commit.
	setvals []string
	stdout  bytes.Buffer
	stderr  stderrBuffer
	done    chan error
	mu      sync.Mutex
}

type lineRange struct {
	first, last int64
	table       string
}

func (s *pgSession) write(text string) error {
	s.lines += int64(strings.Count(text, "\n"))
	_, err := io.WriteString(s.w, text)
	return err
}

func (s *pgSession) output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stdout.String()
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// carryBack carries a PostgreSQL dump back into blue's existing databases; a row blue cannot
// hold is a refusal of its table in the report.
func (postgres) carryBack(ctx context.Context, c Dumps, r *snapshot.Reader, d snapshot.Database, t target, report *snapshot.Report) error {
	err := c.carryBackPostgres(ctx, r, d, t, report)
	var refusal *carryRefusal
	if errors.As(err, &refusal) {
		report.Add(kind, snapshot.StatusFailed, d.Name+"/"+refusal.table, refusal.detail)
		return nil
	}
	return err
}

// carryBackPostgres carries a PostgreSQL dump back into blue's existing databases.
func (c Dumps) carryBackPostgres(ctx context.Context, r *snapshot.Reader, d snapshot.Database, t target, report *snapshot.Report) error {
	green := map[string]*shape{}
	for _, tbl := range d.Tables {
		if len(tbl.Columns) == 0 {
			return fmt.Errorf("the backup records no columns of table %s.%s (made before they were): it cannot be carried back into an existing schema; nothing was changed", tbl.Schema, tbl.Name)
		}
		s := &shape{Schema: tbl.Schema, Name: tbl.Name, Key: tbl.Key}
		for _, col := range tbl.Columns {
			s.Columns = append(s.Columns, column{Column: col})
		}
		green[tableKey(tbl.Schema, tbl.Name)] = s
	}
	plan, ok, err := c.planInto(ctx, t, d, green, report)
	if err != nil || !ok {
		return err
	}
	name := func(table string) string { return d.Name + "/" + table }
	copies := map[string]tableCopy{}
	byDatabase := map[string][]tableCopy{}
	for _, cp := range plan.copies {
		copies[tableKey(cp.schema, cp.name)] = cp
		db, _, _ := strings.Cut(cp.schema, ".")
		byDatabase[db] = append(byDatabase[db], cp)
	}
	if _, err := checkDump(ctx, r, d); err != nil {
		return fmt.Errorf("%w; checked before loading: nothing was changed", err)
	}
	// Read again, checked against the manifest to its end before anything is committed.
	rc, err := r.Open(ctx, d.Key)
	if err != nil {
		return err
	}
	defer rc.Close()
	dec, err := zstd.NewReader(rc, zstd.WithDecoderConcurrency(1))
	if err != nil {
		return fmt.Errorf("%s: %w", d.Key, err)
	}
	defer dec.Close()
	sql := newSQLStream(dec, d, func() {})

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var sessions []*pgSession
	defer func() {
		for _, s := range sessions {
			s.w.CloseWithError(errors.New("carry-back stopped"))
		}
	}()
	open := func(db string) *pgSession {
		s := &pgSession{db: db, done: make(chan error, 1)}
		pr, pw := io.Pipe()
		s.w = pw
		stdin := io.MultiReader(strings.NewReader(t.cred.passwordLine()), pr)
		cmd := pgShell("psql", t.cred, "-X", "-q", "-v", "ON_ERROR_STOP=1", "--dbname="+db)
		go func() {
			err := kube.Exec(ctx, c.Config, c.Client, kube.ExecRequest{Namespace: t.item.Namespace, Pod: t.item.Pod, Container: t.cfg.Container,
				Command: cmd, Stdin: stdin, Stdout: lockedWriter{&s.mu, &s.stdout}, Stderr: &s.stderr})
			pr.CloseWithError(fmt.Errorf("the client ended: %v", err))
			s.done <- err
		}()
		sessions = append(sessions, s)
		return s
	}
	seen := map[string]bool{}
	var cur *pgSession
	var keep []int // indexes of its shared columns in the COPY's
	inData, skipData := false, false
	scan := newSQLScanner("postgresql")
	br := bufio.NewReaderSize(sql, 256<<10)
	var line []byte
	for {
		chunk, isPrefix, rerr := br.ReadLine()
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return fmt.Errorf("database %s: read the dump again: %w", d.Name, rerr)
		}
		if inData {
			// A row: its shared columns only, streamed (a row may be long).
			if len(line) == 0 && !isPrefix && (string(chunk) == `\.` || string(chunk) == "\\.\r") {
				inData = false
				if !skipData {
					if err := cur.write("\\.\n"); err != nil {
						return c.pgFailure(d, cur, err)
					}
					cur.ranges[len(cur.ranges)-1].last = cur.lines
				}
				scan.Write(append(append([]byte(nil), chunk...), '\n'))
				continue
			}
			if !skipData {
				if err := projectRow(cur, chunk, isPrefix, keep, &line); err != nil {
					return c.pgFailure(d, cur, err)
				}
			}
			if !isPrefix {
				line = line[:0]
			}
			scan.Write(append(append([]byte(nil), chunk...), '\n'))
			continue
		}
		full := append(line, chunk...)
		if isPrefix {
			line = full
			continue
		}
		line = nil
		between := scan.state == stNormal && !scan.open
		scan.Write(append(full, '\n'))
		if !between {
			continue
		}
		if strings.HasPrefix(string(full), `\connect`) {
			if scan.schema != "" && (cur == nil || cur.db != scan.schema) {
				cur = open(scan.schema)
				if err := cur.write("BEGIN;\n" + pgLockTimeout + pgUnlinkLargeObjects + pgBegin(byDatabase[cur.db])); err != nil {
					return c.pgFailure(d, cur, err)
				}
			}
			continue
		}
		if cur != nil && scan.state == stNormal && !scan.open {
			// A whole statement on its line, as pg_dump writes these.
			if m := pgSetvalRE.FindStringSubmatch(string(full)); m != nil {
				cur.setvals = append(cur.setvals, pgSetval(m))
				continue
			}
			if pgLargeObjectRE.Match(full) || pgStringsRE.Match(full) {
				if err := cur.write(string(full) + "\n"); err != nil {
					return c.pgFailure(d, cur, err)
				}
				continue
			}
		}
		if cur != nil && pgLargeObjectStatement(full) {
			return fmt.Errorf("database %s: the dump's line %d is a statement on large objects that a carry-back does not run, and leaving it out would lose large objects; nothing was committed", cur.db, scan.line-1)
		}
		m := pgCopyRE.FindStringSubmatch(string(full))
		if m == nil {
			continue
		}
		inData, skipData = true, true
		if cur == nil {
			continue
		}
		nsp, table := splitPgTable(m[1])
		cp, ok := copies[tableKey(cur.db+"."+nsp, table)]
		if !ok {
			continue // not carried back (left, and listed)
		}
		seen[tableKey(cp.schema, cp.name)] = true
		cols := strings.Split(m[2], ",")
		keep = keep[:0]
		for _, want := range cp.columns {
			for i, col := range cols {
				if pgName(col) == want {
					keep = append(keep, i)
				}
			}
		}
		if len(keep) != len(cp.columns) {
			return fmt.Errorf("table %s.%s: the dump's COPY lacks some of the columns its manifest records; nothing was committed", cp.schema, cp.name)
		}
		quoted := make([]string, len(cp.columns))
		for i, col := range cp.columns {
			quoted[i] = pgQuoted(col)
		}
		first := cur.lines + 1
		if err := cur.write("COPY " + cp.pgTable() + " (" + strings.Join(quoted, ", ") + ") FROM stdin;\n"); err != nil {
			return c.pgFailure(d, cur, err)
		}
		cur.ranges = append(cur.ranges, lineRange{first: first, table: cp.schema + "." + cp.name})
		skipData = false
	}
	if !sql.finished() {
		return fmt.Errorf("database %s: the dump read again did not end as checked: %w; nothing was committed", d.Name, snapshot.ErrCorrupt)
	}
	for _, cp := range plan.copies {
		if !seen[tableKey(cp.schema, cp.name)] && !cp.partitioned {
			return fmt.Errorf("table %s.%s: the dump holds no rows of it; nothing was committed", cp.schema, cp.name)
		}
	}
	// Every session took its rows: then commit them, one after the other.
	for _, s := range sessions {
		if err := s.write(pgEnd(byDatabase[s.db]) + "\\echo ferry-ready\n"); err != nil {
			return c.pgFailure(d, s, err)
		}
	}
	for _, s := range sessions {
		if err := s.waitFor(ctx, "ferry-ready"); err != nil {
			return c.pgFailure(d, s, err)
		}
	}
	var committed []string
	for _, s := range sessions {
		err := s.write(strings.Join(s.setvals, "") + "COMMIT;\n\\echo ferry-committed\n\\q\n")
		if err == nil {
			err = s.waitFor(ctx, "ferry-committed")
		}
		if err != nil {
			return fmt.Errorf("%w (databases committed before: %v)", c.pgFailure(d, s, err), committed)
		}
		committed = append(committed, s.db)
		s.w.Close()
		<-s.done
	}
	sessions = nil
	for _, n := range plan.left {
		report.Add(kind, snapshot.StatusSkipped, name(n.table), n.detail)
	}
	report.Count(kind, snapshot.StatusRestored)
	return nil
}

// pgQuoted quotes a PostgreSQL identifier.
func pgQuoted(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// pgTable is the copied table's name in its database, quoted.
func (c tableCopy) pgTable() string { return pgTable(c.schema, c.name) }

// pgTable is the constraint's table's name in its database, quoted.
func (c constraintOf) pgTable() string { return pgTable(c.schema, c.table) }

// pgTable quotes a table's name in its database, of its schema as snapshot.Table names it
// ("database.schema").
func pgTable(schema, name string) string {
	_, nsp, _ := strings.Cut(schema, ".")
	return pgQuoted(nsp) + "." + pgQuoted(name)
}

// pgBegin turns the copied tables' triggers off, makes the foreign keys that must wait
// deferrable, and deferred, and empties the copied tables of a database: in one TRUNCATE (a
// partitioned table's partitions with it), but those a table left as it is references, and those
// they reference, which a DELETE empties (TRUNCATE would refuse), each before those it references.
func pgBegin(copies []tableCopy) string {
	var b strings.Builder
	var truncated []string
	var deleted []tableCopy
	waits := false
	for _, c := range copies {
		for _, tr := range c.triggers {
			b.WriteString("ALTER TABLE " + c.pgTable() + " DISABLE TRIGGER " + pgQuoted(tr.Name) + ";\n")
		}
		for _, fk := range c.deferred {
			b.WriteString("ALTER TABLE " + fk.pgTable() + " ALTER CONSTRAINT " + pgQuoted(fk.name) + " DEFERRABLE;\n")
		}
		waits = waits || c.waits
		if c.deleteOrder > 0 {
			deleted = append(deleted, c)
		} else {
			truncated = append(truncated, c.pgTable())
		}
	}
	if waits {
		b.WriteString("SET CONSTRAINTS ALL DEFERRED;\n")
	}
	if len(truncated) > 0 {
		b.WriteString("TRUNCATE " + strings.Join(truncated, ", ") + ";\n")
	}
	slices.SortStableFunc(deleted, func(x, y tableCopy) int { return x.deleteOrder - y.deleteOrder })
	for _, c := range deleted {
		b.WriteString("DELETE FROM " + c.pgTable() + ";\n")
	}
	return b.String()
}

// pgEnd checks the deferred foreign keys and puts back what pgBegin changed.
func pgEnd(copies []tableCopy) string {
	if len(copies) == 0 {
		return ""
	}
	// Checked now, with no check pending when the tables are altered.
	var b strings.Builder
	b.WriteString("SET CONSTRAINTS ALL IMMEDIATE;\n")
	for _, c := range copies {
		for _, fk := range c.deferred {
			b.WriteString("ALTER TABLE " + fk.pgTable() + " ALTER CONSTRAINT " + pgQuoted(fk.name) + " NOT DEFERRABLE;\n")
		}
		for _, tr := range c.triggers {
			enable := " ENABLE TRIGGER "
			if tr.Enabled == "A" {
				enable = " ENABLE ALWAYS TRIGGER "
			}
			b.WriteString("ALTER TABLE " + c.pgTable() + enable + pgQuoted(tr.Name) + ";\n")
		}
	}
	return b.String()
}

// projectRow gathers the pieces of a COPY row and, at its end, writes its fields at keep (in
// keep's order: blue's columns'). A row is held whole, as the server holds it.
func projectRow(s *pgSession, chunk []byte, more bool, keep []int, line *[]byte) error {
	*line = append(*line, chunk...)
	if more {
		return nil
	}
	fields := bytes.Split(*line, []byte{'\t'})
	out := make([][]byte, len(keep))
	for i, k := range keep {
		if k >= len(fields) {
			return errors.New("a COPY row of the dump has fewer fields than its columns")
		}
		out[i] = fields[k]
	}
	return s.write(string(bytes.Join(out, []byte{'\t'})) + "\n")
}

// waitFor waits until the session printed marker, or ended.
func (s *pgSession) waitFor(ctx context.Context, marker string) error {
	for {
		if strings.Contains(s.output(), marker) {
			return nil
		}
		select {
		case err := <-s.done:
			s.done <- err
			if strings.Contains(s.output(), marker) {
				return nil
			}
			if err == nil {
				err = errors.New("the client ended")
			}
			return err
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// pgFailure names the table a session's error points at and what psql said, cut down.
func (c Dumps) pgFailure(d snapshot.Database, s *pgSession, err error) error {
	// Wait for the client's end, for its message.
	var execErr error
	select {
	case execErr = <-s.done:
		s.done <- execErr
	case <-time.After(30 * time.Second):
	}
	msg := clientMessage(s.stderr.text(), s.stderr.dropped)
	table := ""
	if line := clientLine(msg); line > 0 {
		for _, r := range s.ranges {
			if r.first <= line && (line <= r.last || r.last == 0) {
				table = r.table
			}
		}
	}
	if m := copyContextTable.FindStringSubmatch(msg); table == "" && m != nil {
		// psql names no line for a refused COPY row: its CONTEXT names the table.
		for _, r := range s.ranges {
			if strings.HasSuffix(r.table, "."+m[1]) {
				if table != "" && table != r.table {
					table = "" // two tables of that name in other schemas
					break
				}
				table = r.table
			}
		}
	}
	if table != "" {
		return &carryRefusal{table: table, detail: "a row of the backup does not fit the target's table: " + msg + "; the transactions were rolled back: nothing of database " + d.Name + " was changed"}
	}
	if execErr != nil {
		err = execErr
	}
	return fmt.Errorf("database %s: %w: %s; the transactions were rolled back", s.db, err, msg)
}

// copyContextTable finds the table in the CONTEXT clientMessage keeps of a refused COPY row.
var copyContextTable = regexp.MustCompile(`CONTEXT:\s+COPY ([^\s,:]+), line`)

// carryRefusal is a row blue cannot hold, in a table.
type carryRefusal struct{ table, detail string }

func (e *carryRefusal) Error() string { return e.table + ": " + e.detail }

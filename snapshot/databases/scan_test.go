package databases

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/storage"
)

// mysqlDump has the shapes mysqldump writes: version comments, DELIMITER for triggers and routines,
// quotes with backslash escapes and delimiters inside, a big row on its own.
var mysqlDump = "/*M!999999\\- enable the sandbox mode */ \n" + `-- MariaDB dump 10.19  Distrib 10.11.6-MariaDB
--
-- Host: 127.0.0.1    Database: rs_pipeline
/*!40101 SET @OLD_CHARACTER_SET_CLIENT=@@CHARACTER_SET_CLIENT */;
/*!40101 SET NAMES utf8mb4 */;

--
-- Current Database: ` + "`rs_pipeline`" + `
--

CREATE DATABASE /*!32312 IF NOT EXISTS*/ ` + "`rs_pipeline`" + ` /*!40100 DEFAULT CHARACTER SET utf8mb4 */;

USE ` + "`rs_pipeline`" + `;
DROP TABLE IF EXISTS ` + "`events`" + `;
CREATE TABLE ` + "`events`" + ` (
  ` + "`run`" + ` int(11) DEFAULT NULL,
  ` + "`kind`" + ` varchar(16) DEFAULT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
INSERT INTO ` + "`events`" + ` VALUES (1,'it''s; -- not a comment'),(2,'back\'slash; \\'),(3,"dq;");
INSERT INTO ` + "`events`" + ` VALUES (4,0x` + strings.Repeat("00FF", 300) + `);
DELIMITER ;;
/*!50003 CREATE*/ /*!50017 DEFINER=` + "`root`@`localhost`" + `*/ /*!50003 TRIGGER shout BEFORE INSERT ON events FOR EACH ROW SET NEW.kind = UPPER(NEW.kind); */;;
DELIMITER ;
-- Dump completed on 2026-12-01  8:00:00
`

// pgDump has pg_dump's shapes: meta-commands, dollar quotes, E” strings, COPY data.
var pgDump = `--
-- PostgreSQL database dump
--

\restrict abc123
SET standard_conforming_strings = on;
DROP DATABASE IF EXISTS rs_appdb;
CREATE DATABASE rs_appdb WITH TEMPLATE = template0 ENCODING = 'UTF8';
\connect -reuse-previous=on "dbname='rs_appdb'"
CREATE FUNCTION public.f() RETURNS text LANGUAGE plpgsql AS $_$BEGIN RETURN 'a;b'; END$_$;
COMMENT ON TABLE public.users IS E'it\'s; here';
CREATE TABLE public.files (
    id integer NOT NULL,
    blob bytea
);
COPY public.files (id, blob) FROM stdin;
1	\\x` + strings.Repeat("00ff", 400) + `
2	\N
\.

SELECT pg_catalog.setval('public.seq', 1, false);
\unrestrict abc123
--
-- PostgreSQL database dump complete
--

`

func scanAll(t *testing.T, engine, sql string) *sqlScanner {
	t.Helper()
	s := newSQLScanner(engine)
	if _, err := io.Copy(s, iotestOneByte(sql)); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestScannerFollowsMySQLDumps(t *testing.T) {
	s := scanAll(t, "mysql", mysqlDump)
	if p := s.complete(); p != "" {
		t.Fatalf("a complete dump: %s", p)
	}
	if s.Largest.Table != "rs_pipeline.events" || s.Largest.First != 21 || s.Largest.Bytes != int64(len("INSERT INTO `events` VALUES (4,0x)")+1200) {
		t.Fatalf("largest statement %+v", s.Largest)
	}
	if got := s.Largest.Text(); got != "INSERT INTO `events` VALUES …" {
		t.Fatalf("text %q", got)
	}
	st, ok := s.at(20)
	if !ok || st.Table != "rs_pipeline.events" || st.First != 20 {
		t.Fatalf("line 20: %+v %v", st, ok)
	}
	st, ok = s.at(23)
	if !ok || !strings.Contains(string(st.head), "TRIGGER shout") || string(s.delim) != ";" {
		t.Fatalf("the trigger under DELIMITER ;; is not one statement: %+v, delimiter %q", st, s.delim)
	}
	for _, tc := range []struct{ name, sql string }{
		{"cut in a statement", mysqlDump[:strings.Index(mysqlDump, "(4,0x")+9]},
		{"cut in a quote", mysqlDump[:strings.Index(mysqlDump, `back\'`)+7]},
		{"cut in the trigger after its ;", mysqlDump[:strings.Index(mysqlDump, "UPPER(NEW.kind);")+16]},
		{"cut at the trigger's first ; of ;;", mysqlDump[:strings.Index(mysqlDump, "*/;;")+3]},
	} {
		if p := scanAll(t, "mysql", tc.sql).complete(); p == "" {
			t.Errorf("%s: taken as complete", tc.name)
		}
	}
}

func TestScannerFollowsPostgresDumps(t *testing.T) {
	s := scanAll(t, "postgresql", pgDump)
	if p := s.complete(); p != "" {
		t.Fatalf("a complete dump: %s", p)
	}
	if !s.Largest.Row || s.Largest.Table != "rs_appdb.public.files" || s.Largest.First != 17 || s.Largest.Bytes != int64(len("1\t\\\\x")+1600) {
		t.Fatalf("largest %+v", s.Largest)
	}
	if s.Largest.Text() != "" {
		t.Fatalf("a COPY row shows %q", s.Largest.Text())
	}
	if st, ok := s.at(10); !ok || !strings.HasPrefix(string(st.head), "CREATE FUNCTION") {
		t.Fatalf("line 10: %+v", st)
	}
	for _, tc := range []struct{ name, sql string }{
		{"cut in COPY data", pgDump[:strings.Index(pgDump, "2\t\\N")]},
		{"cut in a dollar quote", pgDump[:strings.Index(pgDump, "END$_$")]},
		{"cut in a statement", pgDump[:strings.Index(pgDump, "SELECT pg_catalog")+20]},
	} {
		if p := scanAll(t, "postgresql", tc.sql).complete(); p == "" {
			t.Errorf("%s: taken as complete", tc.name)
		}
	}
}

func TestClientMessageIsCut(t *testing.T) {
	long := strings.Repeat("0A1B", 5<<20)
	var buf stderrBuffer
	buf.Write([]byte("--------------\nINSERT INTO `t` VALUES (" + long[:1000] + ")\n--------------\n\nERROR 1064 (42000) at line 52: You have an error near '" + long + "' at line 1\nINSERT INTO `t` VALUES (" + long + ")\n"))
	msg := clientMessage(buf.text(), buf.dropped)
	if len(msg) > 2*lineLimit || !strings.HasPrefix(msg, "ERROR 1064 (42000) at line 52: You have an error near '(") || strings.Contains(msg, "0A1B") || !strings.HasSuffix(msg, "(more cut)") {
		t.Fatalf("%d bytes: %q", len(msg), msg)
	}
	var echoed stderrBuffer
	echoed.Write([]byte("--------------\nINSERT INTO `t` VALUES (0x" + long + ")\n--------------\n\nERROR 1142 (42000) at line 49: INSERT command denied\n"))
	if got := clientMessage(echoed.text(), echoed.dropped); got != "ERROR 1142 (42000) at line 49: INSERT command denied (more cut)" {
		t.Fatalf("after an echoed statement: %q", got)
	}
	if len(buf.buf) > stderrKeep || len(buf.tail) > stderrKeep {
		t.Fatalf("kept %d bytes of stderr", len(buf.buf))
	}
	if got := clientLine(msg); got != 52 {
		t.Fatalf("line %d", got)
	}
	if got := clientLine("psql:<stdin>:17: ERROR:  boom"); got != 17 {
		t.Fatalf("psql line %d", got)
	}
	if got := printable("a\x00b\tc\xffd", 10, false); got != "a?b c?d" {
		t.Fatalf("printable %q", got)
	}
	if got := cutQuoted("Duplicate entry '" + strings.Repeat("x", 100) + "' for key '" + strings.Repeat("k", 100) + "'"); got != "Duplicate entry '(100 bytes not shown)' for key '"+strings.Repeat("k", quotedLimit)+"…'" {
		t.Fatalf("cut %q", got)
	}
}

// TestClientMessageShowsNoData: what servers quote of rows and statements in their messages (a
// duplicate key, a value that does not fit, a syntax error's statement text, PostgreSQL's DETAIL
// and CONTEXT lines) never reaches an error; the names of keys, users, tables and constraints do.
func TestClientMessageShowsNoData(t *testing.T) {
	const row = "canary-5e1f0c2b9a7d4e63"
	for _, tc := range []struct{ name, stderr, want string }{
		{"duplicate entry", "ERROR 1062 (23000) at line 25: Duplicate entry '" + row + "' for key 'PRIMARY'\n",
			"ERROR 1062 (23000) at line 25: Duplicate entry '(23 bytes not shown)' for key 'PRIMARY'"},
		{"duplicate entry of two columns", "ERROR 1062 (23000) at line 25: Duplicate entry '7-" + row + "' for key 'by_owner'\n",
			"ERROR 1062 (23000) at line 25: Duplicate entry '(25 bytes not shown)' for key 'by_owner'"},
		{"incorrect value", "ERROR 1366 (22007) at line 9: Incorrect integer value: '" + row + "' for column `db`.`t`.`n` at row 1\n",
			"ERROR 1366 (22007) at line 9: Incorrect integer value: '(23 bytes not shown)' for column `db`.`t`.`n` at row 1"},
		{"syntax error", "ERROR 1064 (42000) at line 3: You have an error in your SQL syntax; check the manual that corresponds to your MariaDB server version for the right syntax to use near '" + row + "')' at line 1\n",
			"near '(23 bytes not shown)'"},
		{"access denied", "ERROR 1045 (28000): Access denied for user 'app'@'10.0.0.7' (using password: YES)\n",
			"ERROR 1045 (28000): Access denied for user 'app'@'10.0.0.7' (using password: YES)"},
		{"unknown table", "ERROR 1146 (42S02) at line 4: Table 'shop.items' doesn't exist\n", "Table 'shop.items' doesn't exist"},
		{"a value of two lines", "ERROR 1064 (42000) at line 3: You have an error near '" + row[:10] + "\n" + row[10:] + "')' at line 1\nERROR 2 (1): next\n", "near '(24 bytes not shown)'"},
		{"an apostrophe in a value", "ERROR 1062 (23000) at line 25: Duplicate entry 'O'Brien " + row + "' for key 'PRIMARY'\n",
			"Duplicate entry '(31 bytes not shown)' for key 'PRIMARY'"},
		{"postgres unique", "psql:<stdin>:40: ERROR:  duplicate key value violates unique constraint \"notes_pkey\"\nDETAIL:  Key (note)=(" + row + ") already exists.\nCONTEXT:  COPY notes, line 1\n",
			`psql:<stdin>:40: ERROR:  duplicate key value violates unique constraint "notes_pkey" | DETAIL:  (not shown: it may quote rows) | CONTEXT:  COPY notes, line 1 (values not shown)`},
		{"postgres bad value", "psql:<stdin>:41: ERROR:  invalid input syntax for type integer: \"" + row + "\"\nCONTEXT:  COPY notes, line 1, column id: \"" + row + "\"\n",
			`psql:<stdin>:41: ERROR:  invalid input syntax for type integer: "(23 bytes not shown)" | CONTEXT:  COPY notes, line 1, column id (values not shown)`},
		{"postgres not null", "psql:<stdin>:42: ERROR:  null value in column \"id\" of relation \"notes\" violates not-null constraint\nDETAIL:  Failing row contains (null, " + row + ").\n",
			`psql:<stdin>:42: ERROR:  null value in column "id" of relation "notes" violates not-null constraint | DETAIL:  (not shown: it may quote rows)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := clientMessage([]byte(tc.stderr), 0)
			if strings.Contains(got, row[7:19]) {
				t.Errorf("the message shows the row: %q", got)
			}
			if !strings.Contains(got, tc.want) {
				t.Errorf("got %q, want it to hold %q", got, tc.want)
			}
		})
	}
}

func TestFailedStatementNamesLineTableAndNoData(t *testing.T) {
	s := scanAll(t, "mysql", mysqlDump)
	err := &clientError{err: errors.New("command terminated with exit code 1"), message: "ERROR 2006 (HY000) at line 23: MySQL server has gone away"}
	got := failedStatement(err, s, 2).Error()
	want := "the statement at line 21 of the dump (table rs_pipeline.events, 1234 bytes), \"INSERT INTO `events` VALUES …\", failed: command terminated"
	if !strings.HasPrefix(got, want) || strings.Contains(got, "00FF") {
		t.Fatalf("got  %s\nwant %s...", got, want)
	}
}

func TestPinnedPassesOnlyWhatWasChecked(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), pinChunk/16*2+1000)
	digests := &chunkDigests{h: sha256.New()}
	digests.Write(data)
	digests.finish()
	if len(digests.sums) != 3 {
		t.Fatalf("%d chunks", len(digests.sums))
	}
	read := func(src []byte) ([]byte, error) {
		var out bytes.Buffer
		_, err := io.Copy(&out, newPinned(bytes.NewReader(src), "db", digests.sums))
		return out.Bytes(), err
	}
	if got, err := read(data); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the same bytes: %d, %v", len(got), err)
	}
	changed := bytes.Clone(data)
	changed[pinChunk+10] ^= 1
	for name, src := range map[string][]byte{"changed": changed, "shorter": data[:len(data)-1], "cut at a chunk": data[:2*pinChunk], "longer": append(bytes.Clone(data), 'x')} {
		got, err := read(src)
		if !errors.Is(err, snapshot.ErrCorrupt) || !strings.Contains(err.Error(), "database db") {
			t.Errorf("%s: %v", name, err)
		}
		if name == "changed" && len(got) > pinChunk {
			t.Errorf("%s: passed on %d bytes, past the chunk that changed", name, len(got))
		}
	}
}

func TestPacketNeed(t *testing.T) {
	for n, want := range map[int64]int64{1: 2048, 1023: 2048, 1024: 3072, 20 << 20: 20<<20 + 2048} {
		if got := packetNeed(n); got != want || got%1024 != 0 {
			t.Errorf("packetNeed(%d) = %d, want %d", n, got, want)
		}
	}
}

// storedDump writes sql as a database's dump of a committed backup in file storage and returns
// the storage, the backup's name and its record of the dump.
func storedDump(t *testing.T, engine, sql string) (storage.Backend, snapshot.Database) {
	t.Helper()
	ctx := context.Background()
	store, err := storage.NewFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	w, err := snapshot.Create(ctx, store, "b1", plans.Cluster{}, &plans.Plan{}, time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	d := snapshot.Database{Name: "app-db", Engine: engine, Key: "databases/app-db.sql.zst", Schemas: []string{"app"}}
	if err := dumpTo(ctx, w, &d, func(out io.Writer) error { _, err := io.WriteString(out, sql); return err }); err != nil {
		t.Fatal(err)
	}
	w.AddDatabase(d)
	if _, err := w.Commit(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	return store, d
}

func TestCheckDumpReadsToTheEndFirst(t *testing.T) {
	ctx := context.Background()
	big := mysqlDump + strings.Repeat("INSERT INTO `events` VALUES (5,0x"+strings.Repeat("0123456789ABCDEF", 1<<12)+");\n", 64)
	for _, tc := range []struct {
		name   string
		sql    string
		damage func([]byte) []byte
		want   string
	}{
		{"intact", big, nil, ""},
		{"truncated", big, func(b []byte) []byte { return b[:len(b)/2] }, "truncated or replaced"},
		{"a flipped byte", big, func(b []byte) []byte { b[len(b)/2] ^= 0x5a; return b }, "database app-db"},
		{"incomplete SQL", big[:len(big)-30], nil, "the dump is not complete SQL: it ends inside a statement"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store, d := storedDump(t, "mysql", tc.sql)
			if tc.damage != nil {
				key := snapshot.Prefix("b1") + d.Key
				rc, err := store.Get(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				data, _ := io.ReadAll(rc)
				rc.Close()
				if err := store.Put(ctx, key, bytes.NewReader(tc.damage(data))); err != nil {
					t.Fatal(err)
				}
			}
			r, err := snapshot.Open(ctx, store, "b1", nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := checkDump(ctx, r, r.Manifest.Databases[0])
			if tc.want == "" {
				if err != nil || got.largest.Bytes != int64(len("INSERT INTO `events` VALUES (5,0x)")+16<<12) || len(got.chunks) != int(d.Bytes/pinChunk)+1 {
					t.Fatalf("%v, %+v", err, got)
				}
				return
			}
			if err == nil || !errors.Is(err, snapshot.ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one matching ErrCorrupt saying %q", err, tc.want)
			}
			t.Log(err)
		})
	}
}

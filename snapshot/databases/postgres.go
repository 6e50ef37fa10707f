package databases

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/snapshot"
)

// postgresSystemDBs belong to the server, not to the platform.
var postgresSystemDBs = map[string]bool{"postgres": true, "template0": true, "template1": true}

func pgShell(program string, cred credentials, args ...string) []string {
	return clientShell("PGPASSWORD", "POSTGRES_PASSWORD", program, append([]string{"--username=" + cred.user, "--no-password"}, args...)...)
}

// pgQuery runs a psql script on database db and returns its tab-separated rows. The script ends
// with \q, so psql stops without waiting for the end of stdin.
func (c Dumps) pgQuery(ctx context.Context, item plans.DataItem, container string, cred credentials, db, script string) ([][]string, error) {
	var out bytes.Buffer
	stdin := strings.NewReader(cred.password + "\n" + script + "\n\\q\n")
	cmd := pgShell("psql", cred, "-X", "-q", "-A", "-t", "-F", "\t", "-v", "ON_ERROR_STOP=1", "--dbname="+db)
	if err := c.exec(ctx, item, container, cmd, stdin, &out); err != nil {
		return nil, err
	}
	return tabRows(&out)
}

// dumpPostgres dumps every database but the server's own with pg_dump --create, one after the
// other into one SQL stream that psql replays, and counts and checksums every table.
func (c Dumps) dumpPostgres(ctx context.Context, w *snapshot.Writer, item plans.DataItem, cfg plans.Database) (snapshot.Database, error) {
	entry := snapshot.Database{Name: item.Name, Engine: "postgresql", Key: "databases/" + item.Name + ".sql.zst"}
	cred, err := c.credentials(ctx, item.Namespace, cfg, "postgres")
	if err != nil {
		return entry, err
	}
	dbs := cfg.Schemas
	if len(dbs) == 0 {
		rows, err := c.pgQuery(ctx, item, cfg.Container, cred, "postgres", "SELECT datname FROM pg_database WHERE NOT datistemplate;")
		if err != nil {
			return entry, fmt.Errorf("list databases: %w", err)
		}
		for _, r := range rows {
			if !postgresSystemDBs[r[0]] {
				dbs = append(dbs, r[0])
			}
		}
	}
	sort.Strings(dbs)
	entry.Schemas = dbs
	if len(dbs) == 0 {
		return entry, nil
	}
	err = dumpTo(ctx, w, &entry, func(out io.Writer) error {
		for _, db := range dbs {
			cmd := pgShell("pg_dump", cred, "--create", "--clean", "--if-exists", "--dbname="+db)
			if err := c.exec(ctx, item, cfg.Container, cmd, strings.NewReader(cred.password+"\n"), out); err != nil {
				return fmt.Errorf("database %s: %w", db, err)
			}
		}
		return nil
	})
	if err != nil {
		return entry, fmt.Errorf("pg_dump in pod %s/%s: %w", item.Namespace, item.Pod, err)
	}
	for _, db := range dbs {
		tables, err := c.pgTableStats(ctx, item, cfg.Container, cred, db)
		if err != nil {
			return entry, fmt.Errorf("database %s: %w", db, err)
		}
		entry.Tables = append(entry.Tables, tables...)
	}
	if err := c.captureShapes(ctx, w, item, cfg, cred, &entry); err != nil {
		return entry, err
	}
	return entry, nil
}

// pgTableStats counts the rows of every table of db and checksums their contents (the MD5 of the
// sorted MD5s of the rows' text), in one repeatable-read snapshot.
func (c Dumps) pgTableStats(ctx context.Context, item plans.DataItem, container string, cred credentials, db string) ([]snapshot.Table, error) {
	rows, err := c.pgQuery(ctx, item, container, cred, db,
		"SELECT schemaname, tablename FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', 'information_schema') ORDER BY 1, 2;")
	if err != nil {
		return nil, fmt.Errorf("list tables: %w", err)
	}
	if len(rows) == 0 {
		return nil, nil
	}
	ident := func(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
	var script strings.Builder
	script.WriteString("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY;\n")
	for _, r := range rows {
		fmt.Fprintf(&script, "SELECT %s, %s, count(*), md5(coalesce(string_agg(md5(t::text), '' ORDER BY md5(t::text)), '')) FROM %s.%s t;\n",
			quote(r[0]), quote(r[1]), ident(r[0]), ident(r[1]))
	}
	script.WriteString("COMMIT;")
	out, err := c.pgQuery(ctx, item, container, cred, db, script.String())
	if err != nil {
		return nil, fmt.Errorf("count and checksum tables: %w", err)
	}
	var tables []snapshot.Table
	for _, r := range out {
		if len(r) != 4 {
			continue
		}
		n, err := strconv.ParseInt(r[2], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("row count of %s.%s: %q", r[0], r[1], r[2])
		}
		tables = append(tables, snapshot.Table{Schema: db + "." + r[0], Name: r[1], Rows: n, Checksum: r[3]})
	}
	if len(tables) != len(rows) {
		return nil, fmt.Errorf("counted %d of %d tables", len(tables), len(rows))
	}
	return tables, nil
}

// Package databases captures the platform's databases as logical dumps taken inside their pods
// (mysqldump for MySQL and MariaDB, pg_dump for PostgreSQL), streamed compressed into the backup,
// with per table row counts and checksums to verify a restore against.
package databases

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/ferrykube/ferry/internal/kube"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/klauspost/compress/zstd"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Dumps dumps the plan's databases, and restores and verifies a backup's databases on a target.
type Dumps struct {
	Config *rest.Config
	Client kubernetes.Interface
	Plan   *plans.Plan
	// Mapping renames namespaces on a restore's target: each database is found there in the mapped
	// namespace of the one it was dumped from.
	Mapping snapshot.Mapping
	// Replace makes a restore drop each MySQL schema the dump holds before loading it (once the
	// whole dump was checked), so that
	// the target holds exactly the dump (tables dropped since the target's copy are gone too; to
	// carry data back). PostgreSQL dumps drop and recreate their databases either way.
	Replace bool
	// Upgrade makes verify hold the target to the rule of a schema upgrade rather than equality
	// (see upgrade.go): the target's new release has migrated the schemas since the dumps were
	// loaded, so tables, columns and rows may have been added. Backups without row digests are
	// verified for equality either way.
	Upgrade bool
	// IntoExistingSchema makes a restore carry a dump taken on green, after an upgrade, back
	// into blue's existing schemas (see carryback.go): the rows of the tables and columns both
	// have, blue's schema never dropped or changed, Replace ignored.
	IntoExistingSchema bool

	dyn dynamic.Interface // made from Config when nil (tests set it)
}

// credentials reach a database as a client in its pod would.
type credentials struct{ user, password string }

// systemSchemas belong to the server, not to the platform.
var systemSchemas = map[string]bool{"mysql": true, "information_schema": true, "performance_schema": true, "sys": true}

// Name implements snapshot.Kind.
func (c Dumps) Name() string { return "databases" }

// Capture dumps every database the plan found (implements snapshot.Kind). Databases without a
// running pod are recorded as skipped.
func (c Dumps) Capture(ctx context.Context, w *snapshot.Writer) error {
	for _, item := range c.Plan.Databases {
		if !item.Found {
			continue
		}
		cfg := c.config(item.Name)
		if item.Pod == "" {
			w.Skip("database", item.Name, fmt.Sprintf("no running pod of %s in %s to dump from", item.Workload, item.Namespace))
			continue
		}
		dump := c.dumpMySQL
		if cfg.Engine == "postgresql" {
			dump = c.dumpPostgres
		}
		entry, err := dump(ctx, w, item, cfg)
		if err != nil {
			return fmt.Errorf("database %s: %w", item.Name, err)
		}
		w.AddDatabase(entry)
	}
	return nil
}

func (c Dumps) config(name string) plans.Database {
	d, _ := c.Plan.Config.DatabaseNamed(name)
	return d
}

// credentials reads the user and password from the database's Secret in namespace (the configured
// one, or its mapped namespace on a restore's target).
func (c Dumps) credentials(ctx context.Context, namespace string, d plans.Database, defaultUser string) (credentials, error) {
	cred := credentials{user: defaultUser}
	if d.Secret == nil {
		return cred, nil
	}
	s, err := c.Client.CoreV1().Secrets(namespace).Get(ctx, d.Secret.Name, metav1.GetOptions{})
	if err != nil {
		return cred, fmt.Errorf("credentials: %w", err)
	}
	if d.Secret.UserKey != "" {
		if u := string(s.Data[d.Secret.UserKey]); u != "" {
			cred.user = u
		}
	}
	if d.Secret.PasswordKey != "" {
		cred.password = string(s.Data[d.Secret.PasswordKey])
	}
	return cred, nil
}

// clientShell runs a database client program in the pod with the password handed over on stdin's
// first line into the variable the client reads (MYSQL_PWD, PGPASSWORD), never on a command line
// or in the pod spec; the rest of stdin goes to the program. Without a password from a Secret,
// the pod's own (the server image's variable, e.g. MYSQL_ROOT_PASSWORD) is used.
func clientShell(passwordVar, imageVar, program string, args ...string) []string {
	script := `IFS= read -r pw; [ -n "$pw" ] || pw="${` + passwordVar + `:-$` + imageVar + `}"; ` +
		`if [ -n "$pw" ]; then export ` + passwordVar + `="$pw"; fi; p="$1"; shift; exec "$p" "$@"`
	return append([]string{"sh", "-c", script, "sh", program}, args...)
}

func mysqlShell(program string, cred credentials, args ...string) []string {
	return clientShell("MYSQL_PWD", "MYSQL_ROOT_PASSWORD", program, append([]string{"--user=" + cred.user}, args...)...)
}

// dumpTo streams what dump writes, compressed, into the backup file entry.Key, and records the
// SQL's digest and size.
func dumpTo(ctx context.Context, w *snapshot.Writer, entry *snapshot.Database, dump func(out io.Writer) error) error {
	pr, pw := io.Pipe()
	sqlHash := sha256.New()
	var sqlBytes countWriter
	dumped := make(chan error, 1)
	go func() {
		enc, err := zstd.NewWriter(pw)
		if err == nil {
			err = dump(io.MultiWriter(enc, sqlHash, &sqlBytes))
			if cerr := enc.Close(); err == nil {
				err = cerr
			}
		}
		pw.CloseWithError(err)
		dumped <- err
	}()
	stored, putErr := w.Put(ctx, entry.Key, pr)
	pr.CloseWithError(putErr)
	if err := <-dumped; err != nil {
		return err
	}
	if putErr != nil {
		return putErr
	}
	entry.Key, entry.SHA256, entry.Bytes = stored, hex.EncodeToString(sqlHash.Sum(nil)), sqlBytes.n
	return nil
}

func (c Dumps) exec(ctx context.Context, item plans.DataItem, container string, cmd []string, stdin io.Reader, stdout io.Writer) error {
	var stderr stderrBuffer
	err := kube.Exec(ctx, c.Config, c.Client, kube.ExecRequest{Namespace: item.Namespace, Pod: item.Pod, Container: container,
		Command: cmd, Stdin: stdin, Stdout: stdout, Stderr: &stderr})
	if err != nil {
		// What a client says may quote statements and rows: only clientMessage's cut of it.
		return &clientError{err: err, message: clientMessage(stderr.text(), stderr.dropped)}
	}
	return nil
}

// query runs SQL in one mysql session and returns its tab-separated rows. The script ends with quit,
// so the client stops without waiting for the end of stdin.
func (c Dumps) query(ctx context.Context, item plans.DataItem, container string, cred credentials, sql string) ([][]string, error) {
	var out bytes.Buffer
	stdin := strings.NewReader(cred.password + "\n" + sql + "\nquit\n")
	if err := c.exec(ctx, item, container, mysqlShell("mysql", cred, "--batch", "--skip-column-names"), stdin, &out); err != nil {
		return nil, err
	}
	return tabRows(&out)
}

// tabRows splits a client's tab-separated output into rows of fields.
func tabRows(out io.Reader) ([][]string, error) {
	var rows [][]string
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		if line := sc.Text(); line != "" {
			rows = append(rows, strings.Split(line, "\t"))
		}
	}
	return rows, sc.Err()
}

func (c Dumps) dumpMySQL(ctx context.Context, w *snapshot.Writer, item plans.DataItem, cfg plans.Database) (snapshot.Database, error) {
	entry := snapshot.Database{Name: item.Name, Engine: "mysql", Key: "databases/" + item.Name + ".sql.zst"}
	cred, err := c.credentials(ctx, item.Namespace, cfg, "root")
	if err != nil {
		return entry, err
	}
	schemas := cfg.Schemas
	if len(schemas) == 0 {
		rows, err := c.query(ctx, item, cfg.Container, cred, "SHOW DATABASES;")
		if err != nil {
			return entry, fmt.Errorf("list schemas: %w", err)
		}
		for _, r := range rows {
			if !systemSchemas[r[0]] {
				schemas = append(schemas, r[0])
			}
		}
	}
	sort.Strings(schemas)
	entry.Schemas = schemas
	if len(schemas) == 0 {
		return entry, nil
	}

	// Dump, compress and upload as one stream; the digest is of the SQL itself.
	err = dumpTo(ctx, w, &entry, func(out io.Writer) error {
		// The client's own limit (mysqldump's default is 24 MiB) would refuse a bigger row.
		args := append([]string{"--single-transaction", "--routines", "--triggers", "--events", "--hex-blob",
			"--max-allowed-packet=" + strconv.Itoa(maxPacket), "--databases"}, schemas...)
		return c.exec(ctx, item, cfg.Container, mysqlShell("mysqldump", cred, args...), strings.NewReader(cred.password+"\n"), out)
	})
	if err != nil {
		return entry, fmt.Errorf("mysqldump in pod %s/%s: %w", item.Namespace, item.Pod, err)
	}

	tables, err := c.tableStats(ctx, item, cfg.Container, cred, schemas)
	if err != nil {
		return entry, err
	}
	entry.Tables = tables
	if err := c.captureShapes(ctx, w, item, cfg, cred, &entry); err != nil {
		return entry, err
	}
	return entry, nil
}

// captureShapes records the columns and primary key of each dumped table and the digests of its
// rows, for verify after a schema upgrade.
func (c Dumps) captureShapes(ctx context.Context, w *snapshot.Writer, item plans.DataItem, cfg plans.Database, cred credentials, entry *snapshot.Database) error {
	if len(entry.Tables) == 0 {
		return nil
	}
	shapes, err := c.shapes(ctx, item, cfg.Container, cred, entry.Engine, entry.Schemas)
	if err != nil {
		return err
	}
	if err := recordShapes(entry.Tables, shapes); err != nil {
		return err
	}
	return c.captureDigests(ctx, w, item, cfg, cred, entry)
}

// tableStats counts rows and checksums every base table, in one consistent snapshot.
func (c Dumps) tableStats(ctx context.Context, item plans.DataItem, container string, cred credentials, schemas []string) ([]snapshot.Table, error) {
	quoted := make([]string, len(schemas))
	for i, s := range schemas {
		quoted[i] = "'" + strings.ReplaceAll(s, "'", "''") + "'"
	}
	rows, err := c.query(ctx, item, container, cred, "SELECT table_schema, table_name FROM information_schema.tables WHERE table_type='BASE TABLE' AND table_schema IN ("+strings.Join(quoted, ",")+") ORDER BY 1, 2;")
	if err != nil {
		return nil, fmt.Errorf("list tables: %w", err)
	}
	if len(rows) == 0 {
		return nil, nil
	}
	ident := func(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }
	var sql strings.Builder
	sql.WriteString("START TRANSACTION WITH CONSISTENT SNAPSHOT;\n")
	for _, r := range rows {
		fmt.Fprintf(&sql, "SELECT 'rows', %s, %s, COUNT(*) FROM %s.%s;\n", quote(r[0]), quote(r[1]), ident(r[0]), ident(r[1]))
		fmt.Fprintf(&sql, "CHECKSUM TABLE %s.%s EXTENDED;\n", ident(r[0]), ident(r[1]))
	}
	sql.WriteString("COMMIT;")
	out, err := c.query(ctx, item, container, cred, sql.String())
	if err != nil {
		return nil, fmt.Errorf("count and checksum tables: %w", err)
	}
	var tables []snapshot.Table
	for _, r := range out {
		switch {
		case len(r) == 4 && r[0] == "rows":
			n, err := strconv.ParseInt(r[3], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("row count of %s.%s: %q", r[1], r[2], r[3])
			}
			tables = append(tables, snapshot.Table{Schema: r[1], Name: r[2], Rows: n})
		case len(r) == 2 && len(tables) > 0: // CHECKSUM TABLE: "schema.table<TAB>checksum"
			tables[len(tables)-1].Checksum = r[1]
		}
	}
	if len(tables) != len(rows) {
		return nil, fmt.Errorf("counted %d of %d tables", len(tables), len(rows))
	}
	return tables, nil
}

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

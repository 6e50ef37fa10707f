// Package databases captures the platform's databases as logical dumps taken inside their pods
// (mysqldump for MySQL and MariaDB, pg_dump for PostgreSQL), streamed compressed into the backup,
// with per table row counts and checksums to verify a restore against.
package databases

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"strings"

	"github.com/ferrykube/ferry/internal/kube"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/plans/config"
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
	// Exact makes a restore drop each MySQL schema the dump holds before loading it (once the
	// whole dump was checked), so that
	// the target holds exactly the dump (tables dropped since the target's copy are gone too; to
	// carry data back). PostgreSQL dumps drop and recreate their databases either way.
	Exact bool
	// Upgrade makes verify hold the target to the rule of a schema upgrade rather than equality
	// (see upgrade.go): the target's new release has migrated the schemas since the dumps were
	// loaded, so tables, columns and rows may have been added. Backups without row digests are
	// verified for equality either way.
	Upgrade bool
	// IntoExistingSchema makes a restore carry a dump taken on green, after an upgrade, back
	// into blue's existing schemas (see carryback.go): the rows of the tables and columns both
	// have, blue's schema never dropped or changed, Exact ignored.
	IntoExistingSchema bool
	// Log takes the warnings of a step that goes on (nil: none are logged).
	Log *slog.Logger

	dyn dynamic.Interface // made from Config when nil (tests set it)
}

// credentials reach a database as a client in its pod would.
type credentials struct{ user, password string }

// Name implements snapshot.Kind.
func (c Dumps) Name() string { return "databases" }

// engine is a kind of database server: how ferry's clients, run in the database's pod, list,
// dump, load, count and describe its schemas. Each engine is a file of its own (mysql.go for
// MySQL and MariaDB, postgres.go for PostgreSQL), picked by the name ferry.yaml and the manifest
// give it (engineFor), as database/sql picks a driver by name; Dumps holds what engines share
// (the backup's streams, checks, reports and the comparisons). Schemas are MySQL's schemas or
// PostgreSQL's databases.
type engine interface {
	// defaultUser is who the clients connect as when no Secret names a user.
	defaultUser() string
	// listSchemas lists the server's schemas, but the server's own.
	listSchemas(ctx context.Context, c Dumps, t target) ([]string, error)
	// dump writes the SQL that recreates the schemas, as the engine's client replays it, to out;
	// with schemaOnly, without rows.
	dump(ctx context.Context, c Dumps, t target, schemas []string, schemaOnly bool, out io.Writer) error
	// checkNeeds says what of the dump's needs (the accounts it names, the extensions it
	// creates) the target's server or its user cannot meet; see accounts.go.
	checkNeeds(ctx context.Context, c Dumps, t target, d snapshot.Database, n dumpNeeds) (unmet, error)
	// stats counts and checksums the base tables of the schemas the server has, in one
	// consistent snapshot a schema at least.
	stats(ctx context.Context, c Dumps, t target, schemas []string) ([]snapshot.Table, error)
	// beyondTables counts and checksums the large objects of the schemas the server has and
	// reads where their sequences are (none of an engine without them).
	beyondTables(ctx context.Context, c Dumps, t target, schemas []string) (beyondTables, error)
	// shapes reads the columns and primary keys of those tables, by tableKey.
	shapes(ctx context.Context, c Dumps, t target, schemas []string) (map[string]*shape, error)
	// digests writes what the server prints for the digest queries, in their order, to out (see
	// digests.go).
	digests(ctx context.Context, c Dumps, t target, qs []digestQuery, out io.Writer) error
	// prepareLoad readies the server for the client that loads dump d, checked (see load), and
	// says how that client runs. With stage, the dump's schemas are loaded into staging schemas.
	prepareLoad(ctx context.Context, c Dumps, t target, d snapshot.Database, checked *checkedDump, stage map[string]string) (loading, error)
	// carryBack carries dump d, taken on green after an upgrade, back into the target's
	// existing schemas (see carryback.go), each table refused or left in the report.
	carryBack(ctx context.Context, c Dumps, r *snapshot.Reader, d snapshot.Database, t target, report *snapshot.Report) error
}

// beyondTables is what a database holds beside its tables' rows: PostgreSQL's large objects
// and sequences.
type beyondTables struct {
	largeObjects []snapshot.LargeObjects
	sequences    []snapshot.Sequence
}

// loading is how a dump's client runs on the target: the command, what stdin holds before the
// dump's SQL and after it, and what puts the server back once it ran (or nil).
type loading struct {
	cmd        []string
	begin, end string
	putBack    func(context.Context) error
}

// engineFor is the engine named so in ferry.yaml and the manifest.
func engineFor(name string) (engine, error) {
	switch name {
	case "mysql":
		return mysql{}, nil
	case "postgresql":
		return postgres{}, nil
	}
	return nil, fmt.Errorf("engine %q: want mysql or postgresql", name)
}

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
		var entry snapshot.Database
		// The files capture stores are written anew, the dump from its start.
		err := c.runAgainIfBroken(ctx, item.Name, "dump", func() (err error) {
			entry, err = c.capture(ctx, w, item, cfg)
			return err
		})
		if err != nil {
			return fmt.Errorf("database %s: %w", item.Name, err)
		}
		w.AddDatabase(entry)
	}
	return nil
}

// capture dumps the schemas of one database (all but the server's own when the configuration
// names none), compressed into one file of the backup, and counts and checksums its tables and
// records their columns, keys and row digests.
func (c Dumps) capture(ctx context.Context, w *snapshot.Writer, item plans.DataItem, cfg config.Database) (snapshot.Database, error) {
	entry := snapshot.Database{Name: item.Name, Engine: cfg.Engine, Key: "databases/" + item.Name + ".sql.zst", ValuesAsText: snapshot.ValuesAsTextFixed}
	t, schemas, err := c.onSource(ctx, item, cfg)
	if err != nil {
		return entry, err
	}
	eng := t.eng
	entry.Schemas = schemas
	if len(schemas) == 0 {
		return entry, nil
	}
	// The tables are read before the dump and after it: the dump is one moment between the two,
	// so what both readings agree on, the dump holds (a database its application writes to, as
	// a scheduled backup finds it, has tables that changed in between; see readingsAround).
	tablesBefore, err := eng.stats(ctx, c, t, schemas)
	if err != nil {
		return entry, err
	}
	beyondBefore, err := eng.beyondTables(ctx, c, t, schemas)
	if err != nil {
		return entry, err
	}
	// Dump, compress and upload as one stream; the digest is of the SQL itself.
	if err := dumpTo(ctx, w, &entry, func(out io.Writer) error { return eng.dump(ctx, c, t, schemas, false, out) }); err != nil {
		return entry, err
	}
	tablesAfter, err := eng.stats(ctx, c, t, schemas)
	if err != nil {
		return entry, err
	}
	beyondAfter, err := eng.beyondTables(ctx, c, t, schemas)
	if err != nil {
		return entry, err
	}
	entry.Tables, entry.LargeObjects = readingsAround(tablesBefore, tablesAfter, beyondBefore.largeObjects, beyondAfter.largeObjects)
	// A sequence only moves on: the dump holds it where it was before, or further.
	entry.Sequences = beyondBefore.sequences
	if written := entry.WrittenWhileDumped(); len(written) > 0 && c.Log != nil {
		c.Log.Warn("tables were written to while they were dumped: a restore loads them as dumped, and verify cannot check them; quiesce the database's writers for a backup that verify can check",
			"database", item.Name, "tables", written)
	}
	if err := c.captureShapes(ctx, w, t, &entry); err != nil {
		return entry, err
	}
	return entry, nil
}

// onSource is a planned database on the source (c's cluster): its server as a client reaches it,
// and the schemas to dump, sorted: those its configuration names, else all but the server's own.
func (c Dumps) onSource(ctx context.Context, item plans.DataItem, cfg config.Database) (target, []string, error) {
	eng, err := engineFor(cfg.Engine)
	if err != nil {
		return target{}, nil, err
	}
	t := target{item: item, cfg: cfg, eng: eng}
	if t.cred, err = c.credentials(ctx, item.Namespace, cfg, eng.defaultUser()); err != nil {
		return t, nil, err
	}
	schemas := slices.Clone(cfg.Schemas)
	if len(schemas) == 0 {
		if schemas, err = eng.listSchemas(ctx, c, t); err != nil {
			return t, nil, err
		}
	}
	sort.Strings(schemas)
	return t, schemas, nil
}

// runAgainIfBroken runs f, a step safe to run twice, again while its exec breaks off in transit
// (kube.RetryBroken); step names it in the warning.
func (c Dumps) runAgainIfBroken(ctx context.Context, database, step string, f func() error) error {
	return kube.RetryBroken(ctx, f, func(attempt int, err error) {
		if c.Log != nil {
			c.Log.Warn("the database's exec broke off; running its "+step+" again", "database", database, "attempt", attempt, "error", err)
		}
	})
}

func (c Dumps) config(name string) config.Database {
	d, _ := c.Plan.Config.DatabaseNamed(name)
	return d
}

// credentials reads the user and password from the database's Secret in namespace (the configured
// one, or its mapped namespace on a restore's target).
func (c Dumps) credentials(ctx context.Context, namespace string, d config.Database, defaultUser string) (credentials, error) {
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

// passwordLine is the first line of a client's stdin (clientShell): the password with each byte
// written as printf's octal escape, so that one of any bytes (a newline a Secret made from a file
// ends with, quotes, backslashes) is one line, and comes out of printf as it went in.
func (c credentials) passwordLine() string {
	var b strings.Builder
	for i := 0; i < len(c.password); i++ {
		fmt.Fprintf(&b, `\0%03o`, c.password[i])
	}
	b.WriteByte('\n')
	return b.String()
}

// clientShell runs a database client program in the pod with the password handed over on stdin's
// first line (passwordLine) into the variable the client reads (MYSQL_PWD, PGPASSWORD), never on
// a command line or in the pod spec; the rest of stdin goes to the program. Without a password
// from a Secret, the pod's own (the server image's variable, e.g. MYSQL_ROOT_PASSWORD) is used.
// printf's output ends in "_" because $(...) drops the newlines a value ends with.
func clientShell(passwordVar, imageVar, program string, args ...string) []string {
	script := `IFS= read -r pw; pw=$(printf '%b_' "$pw"); pw=${pw%_}; [ -n "$pw" ] || pw="${` + passwordVar + `:-$` + imageVar + `}"; ` +
		`if [ -n "$pw" ]; then export ` + passwordVar + `="$pw"; fi; p="$1"; shift; exec "$p" "$@"`
	return append([]string{"sh", "-c", script, "sh", program}, args...)
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

// firstNotIn is the first field of each row, but those in system.
func firstNotIn(rows [][]string, system map[string]bool) []string {
	var out []string
	for _, r := range rows {
		if !system[r[0]] {
			out = append(out, r[0])
		}
	}
	return out
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

// captureShapes records the columns and primary key of each dumped table and the digests of its
// rows, for verify after a schema upgrade.
func (c Dumps) captureShapes(ctx context.Context, w *snapshot.Writer, t target, entry *snapshot.Database) error {
	if len(entry.Tables) == 0 {
		return nil
	}
	shapes, err := t.eng.shapes(ctx, c, t, entry.Schemas)
	if err != nil {
		return err
	}
	if err := recordShapes(entry.Tables, shapes); err != nil {
		return err
	}
	return c.captureDigests(ctx, w, t, entry)
}

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

package databases

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ferrykube/ferry/internal/kube"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/plans/config"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/klauspost/compress/zstd"
	"k8s.io/client-go/dynamic"
)

// kind names the databases in reports.
const kind = "databases"

// target is a backed-up database's server on the target cluster.
type target struct {
	item plans.DataItem // in the mapped namespace, with the target's pod
	cfg  config.Database
	cred credentials
	eng  engine
	// serverSettings reads values as text in the server's own settings, not ferry's fixed ones:
	// a backup made before those holds checksums and digests read so.
	serverSettings bool
}

func (c Dumps) dynamicClient() (dynamic.Interface, error) {
	if c.dyn != nil {
		return c.dyn, nil
	}
	return dynamic.NewForConfig(c.Config)
}

// locate finds the pod of a backed-up database on the target cluster as planning found it on the
// source: by the workload the backup's configuration names, in the mapped namespace, unless its
// target section says otherwise; the credentials come from the target's Secret (or, without
// one, the pod's environment).
func (c Dumps) locate(ctx context.Context, dyn dynamic.Interface, r *snapshot.Reader, d snapshot.Database) (target, error) {
	var cfg config.Database
	found := false
	if p := r.Manifest.Plan; p != nil {
		cfg, found = p.Config.DatabaseNamed(d.Name)
	}
	if !found {
		return target{}, fmt.Errorf("the backup's configuration does not say where database %s runs", d.Name)
	}
	return c.locateConfigured(ctx, dyn, cfg, d, plans.TargetPodWait)
}

// locateConfigured finds database d on the target as cfg, its configuration, says (its target
// section over the source's place), waiting up to wait for its pod to run.
func (c Dumps) locateConfigured(ctx context.Context, dyn dynamic.Interface, cfg config.Database, d snapshot.Database, wait time.Duration) (target, error) {
	cfg = cfg.OnTarget(c.Mapping.Namespace)
	ns := cfg.Namespace
	w, pod, err := plans.WaitForWorkloadPod(ctx, dyn, ns, cfg.Workload, wait)
	if err != nil {
		return target{}, err
	}
	if w == nil {
		return target{}, fmt.Errorf("no %s in namespace %s on the target", cfg.Workload, ns)
	}
	if pod == nil {
		return target{}, fmt.Errorf("no running pod of %s in namespace %s on the target", cfg.Workload, ns)
	}
	t := target{item: plans.DataItem{Name: d.Name, Engine: d.Engine, Namespace: ns, Workload: cfg.Workload, Pod: pod.GetName()}, cfg: cfg,
		serverSettings: d.ValuesAsText == ""}
	if t.eng, err = engineFor(d.Engine); err != nil {
		return target{}, err
	}
	if t.cred, err = c.credentials(ctx, ns, cfg, t.eng.defaultUser()); err != nil {
		return target{}, err
	}
	return t, nil
}

// Restore checks each database's dump to its end and then streams it into its server on the
// target (mysql or psql in the database's pod; see load), and then counts and checksums every
// table there: a table that differs from the backup is a failure (implements snapshot.Kind). The dumps replace what they hold, so a
// second restore leaves the same data: mysqldump drops each table before creating it, and the
// PostgreSQL dumps drop and recreate their databases.
func (c Dumps) Restore(ctx context.Context, r *snapshot.Reader, report *snapshot.Report) error {
	report.AddNotInBackup(kind, r.Manifest, "database")
	if len(r.Manifest.Databases) == 0 {
		return nil
	}
	dyn, err := c.dynamicClient()
	if err != nil {
		return err
	}
	for _, d := range r.Manifest.Databases {
		if len(d.Schemas) == 0 {
			report.Count(kind, snapshot.StatusUnchanged) // nothing was dumped: nothing to load
			continue
		}
		restore := c.restoreOne
		if c.IntoExistingSchema {
			restore = c.carryBackOne
		}
		// A load replaces what the dump holds (mysqldump drops each table before creating it; a
		// PostgreSQL dump drops and recreates its databases); a carry-back replaces blue's rows
		// in one transaction; the tables are checked after either. A restore whose exec broke
		// off is run again, from the dump's start: the client that broke off has had its stdin
		// end, and at least 2 seconds to stop. What a try that broke reported is dropped with it.
		var tried *snapshot.Report
		tries := 0
		err := c.runAgainIfBroken(ctx, d.Name, "restore", func() error {
			tried, tries = &snapshot.Report{}, tries+1
			return restore(ctx, dyn, r, d, tried)
		})
		report.Merge(tried)
		if err != nil && tries > 1 {
			err = fmt.Errorf("%w (the last of %d tries; one that broke off may have changed the target)", err, tries)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			report.Add(kind, snapshot.StatusFailed, d.Name, err.Error())
		}
	}
	return nil
}

func (c Dumps) restoreOne(ctx context.Context, dyn dynamic.Interface, r *snapshot.Reader, d snapshot.Database, report *snapshot.Report) error {
	t, err := c.locate(ctx, dyn, r, d)
	if err != nil {
		return err
	}
	if err := c.load(ctx, r, d, t, nil); err != nil {
		return err
	}
	got, gotBeyond, err := c.statsOf(ctx, t, d)
	if err != nil {
		return fmt.Errorf("loaded, but the tables could not be counted on the target: %w", err)
	}
	ok := true
	var unchecked []string
	for _, diff := range append(compareTables(d, got), compareBeyondTables(d, gotBeyond, false)...) {
		switch {
		case diff.status == snapshot.StatusDifferent && diff.extra:
			// The target's own table: a restore leaves it, verify names it.
		case diff.unchecked:
			// Loaded as the dump holds it, whose digest was checked before the load; verify names it.
			unchecked = append(unchecked, strings.TrimPrefix(diff.name, d.Name+"/"))
		default:
			report.Add(kind, snapshot.StatusFailed, diff.name, "after the restore: "+diff.detail)
			ok = false
		}
	}
	switch {
	case ok && len(unchecked) > 0:
		report.Add(kind, snapshot.StatusRestored, d.Name, "loaded as dumped; not checked after the load, as they were written to while they were dumped: "+strings.Join(unchecked, ", "))
	case ok:
		report.Count(kind, snapshot.StatusRestored)
	}
	return nil
}

// load puts a dump into the database's server on the target, in two reads of the backup. The
// first runs nothing: it checks the whole dump (checkDump), so that a truncated, damaged or
// tampered dump fails before any statement, and before the schemas Exact drops or the
// databases a PostgreSQL dump drops are touched; it also collects the accounts and extensions the
// dump needs, which the target's server must have (engine.checkNeeds: a load stopped at the first
// it lacks would have dropped a PostgreSQL database). Then the server's max_allowed_packet is made to
// fit the largest statement (fitPacket), and the second read streams the dump, decompressed, into
// the client in the pod, each MiB held back until it matches the first read (pinned). What is left:
// a load that fails part way for a reason of the target (a statement the server refuses, a lost
// connection) leaves the target partly loaded; the error says so and names the statement.
//
// The password goes on stdin's first line (clientShell), and stdin ends with the client's quit
// command because the stream's end may never reach the client; the client stops at the first
// failing statement.
//
// With stage (MySQL only: dumped schema -> staging schema), the dump goes through a
// stagingFilter into the staging schemas, which are dropped first; the dumped schemas are not
// touched, whatever Exact says.
func (c Dumps) load(ctx context.Context, r *snapshot.Reader, d snapshot.Database, t target, stage map[string]string) (err error) {
	checked, err := checkDump(ctx, r, d)
	if err != nil {
		return fmt.Errorf("%w; checked before loading: nothing was loaded", err)
	}

	if stage == nil { // staging leaves out what needs accounts
		u, err := t.eng.checkNeeds(ctx, c, t, d, checked.needs)
		if err == nil {
			err = u.refusal()
		}
		if err != nil {
			return fmt.Errorf("database %s: %w; nothing was loaded", d.Name, err)
		}
		for _, m := range u.unsure {
			if c.Log != nil {
				c.Log.Warn("the dump's needs are not all checked: "+m, "database", d.Name)
			}
		}
	}
	l, err := t.eng.prepareLoad(ctx, c, t, d, checked, stage)
	if err != nil {
		return err
	}
	if l.putBack != nil {
		// A load run again would find the setting raised, and never put it back.
		defer func() {
			if perr := l.putBack(ctx); perr != nil {
				err = kube.Final(errors.Join(err, perr))
			}
		}()
	}
	begin := l.begin

	// The client is cancelled when the dump read again is not the one checked.
	execCtx, cancelExec := context.WithCancel(ctx)
	defer cancelExec()
	readCtx, cancelRead := context.WithCancel(ctx)
	defer cancelRead()
	rc, err := r.Open(readCtx, d.Key)
	if err != nil {
		return err
	}
	dec, err := zstd.NewReader(rc, zstd.WithDecoderConcurrency(1))
	if err != nil {
		rc.Close()
		return fmt.Errorf("%s: %w", d.Key, err)
	}
	sql := newSQLStream(newPinned(dec, d.Name, checked.chunks), d, cancelExec)
	scan := newSQLScanner(d.Engine)
	var toClient io.Reader = sql
	var staged *stagingReader
	if stage != nil {
		// The client's line numbers are those of the filtered SQL, which the scanner reads.
		staged = newStagingReader(sql, stage)
		toClient = staged
	}
	stdin := kube.NewStdin(io.MultiReader(strings.NewReader(t.cred.passwordLine()+begin), io.TeeReader(toClient, scan), strings.NewReader(l.end)), nil)
	// The client's stderr is kept here, not by exec: a client that stops while its stdin is still
	// being sent may end the exec without an error, and what it said names the statement.
	var stderr stderrBuffer
	err = kube.Exec(execCtx, c.Config, c.Client, kube.ExecRequest{Namespace: t.item.Namespace, Pod: t.item.Pod, Container: t.cfg.Container,
		Command: l.cmd, Stdin: stdin, Stdout: io.Discard, Stderr: &stderr})
	cancelExec()
	stdin.Stop() // the exec's copy of stdin may still be reading: wait for it
	dec.Close()
	rc.Close() // checked already; a load that stopped early leaves the rest unread
	cancelRead()
	partly := "; the target may hold part of the dump"
	if sql.n == 0 && begin == "" {
		partly = ""
	}
	if serr := sql.failure(); serr != nil {
		return fmt.Errorf("%w%s", serr, partly)
	}
	if staged != nil && staged.f.err != nil {
		return fmt.Errorf("database %s: %w; only its staging schemas may hold part of it", d.Name, staged.f.err)
	}
	if err == nil && !sql.finished() {
		err = errors.New("the client ended before the end of the dump")
	}
	if err != nil {
		err = &clientError{err: err, message: clientMessage(stderr.text(), stderr.dropped)}
		return fmt.Errorf("load the dump into pod %s/%s: %w%s", t.item.Namespace, t.item.Pod, failedStatement(err, scan, strings.Count(begin, "\n")), partly)
	}
	return nil
}

// failedStatement names the statement of the dump a client's error points at (by the line of
// its input), by its line in the dump, its table, its size and its beginning without data.
func failedStatement(err error, scan *sqlScanner, linesBefore int) error {
	var ce *clientError
	if !errors.As(err, &ce) {
		return err
	}
	line := clientLine(ce.message) - int64(linesBefore)
	if line <= 0 {
		return err
	}
	st, ok := scan.at(line)
	if !ok {
		return fmt.Errorf("at line %d of the dump: %w", line, err)
	}
	what := fmt.Sprintf("the statement at line %d of the dump", st.First)
	if st.Row {
		what = fmt.Sprintf("the COPY row at line %d of the dump", st.First)
	}
	if st.Table != "" {
		what += " (table " + st.Table + ", " + strconv.FormatInt(st.Bytes, 10) + " bytes)"
	} else {
		what += " (" + strconv.FormatInt(st.Bytes, 10) + " bytes)"
	}
	if text := st.Text(); text != "" {
		what += ", " + strconv.Quote(text) + ","
	}
	return fmt.Errorf("%s failed: %w", what, err)
}

// sqlStream passes a dump's SQL on while counting and hashing it, and fails, cancelling the
// client, when it is longer than the manifest says or ends with another size or SHA-256.
type sqlStream struct {
	src    io.Reader
	db     snapshot.Database
	cancel func()
	h      hash.Hash
	n      int64

	mu   sync.Mutex
	err  error
	done bool
}

func newSQLStream(src io.Reader, db snapshot.Database, cancel func()) *sqlStream {
	return &sqlStream{src: src, db: db, cancel: cancel, h: sha256.New()}
}

func (s *sqlStream) Read(p []byte) (int, error) {
	if err := s.failure(); err != nil {
		return 0, err
	}
	n, err := s.src.Read(p)
	s.h.Write(p[:n])
	s.n += int64(n)
	switch {
	case s.n > s.db.Bytes:
		return 0, s.fail(fmt.Errorf("database %s: the dump is longer than the %d bytes the manifest says: %w", s.db.Name, s.db.Bytes, snapshot.ErrCorrupt))
	case errors.Is(err, io.EOF):
		if s.n != s.db.Bytes {
			return 0, s.fail(fmt.Errorf("database %s: the dump holds %d bytes of SQL, the manifest says %d: %w", s.db.Name, s.n, s.db.Bytes, snapshot.ErrCorrupt))
		}
		if sum := hex.EncodeToString(s.h.Sum(nil)); sum != s.db.SHA256 {
			return 0, s.fail(fmt.Errorf("database %s: the dump's SHA-256 is %s, the manifest says %s: %w", s.db.Name, sum, s.db.SHA256, snapshot.ErrCorrupt))
		}
		s.mu.Lock()
		s.done = true
		s.mu.Unlock()
	case err != nil:
		return n, s.fail(fmt.Errorf("database %s: read the dump: %w", s.db.Name, err))
	}
	return n, err
}

func (s *sqlStream) fail(err error) error {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
	s.cancel()
	return err
}

func (s *sqlStream) failure() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// finished reports whether the whole dump was read and matched the manifest.
func (s *sqlStream) finished() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done
}

package databases

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/ferrykube/ferry/snapshot"
	"github.com/klauspost/compress/zstd"
)

// Row digests let verify tell, after a new release migrated the schemas, whether every row of the
// dump is still on the target with the same values in the columns both versions have, without
// any value leaving the server: per row, the server computes a digest of the row's key (its
// primary key's values; all its values for a table without one) and one digest of each column's
// value as text, 16 hex digits each, and sorts the rows by the key's digest. The backup keeps the
// source's rows so (the file Database.RowDigests):
//
//	table<TAB>schema<TAB>name
//	<key digest><TAB><digest of column 1><TAB>...   one line a row, ascending by key digest
//
// and verify has the target compute the same for the dump's key and the columns it still has, and
// merges the two streams. A NULL's digest is "-". Digests of values are as sensitive as the
// values of a low-entropy column: the file is a stream of the backup like the dump, encrypted
// when the backup is, and no digest is ever shown.

// digestQuery is what the server is asked to digest of one table.
type digestQuery struct {
	schema, name string   // as snapshot.Table names them
	key          []string // the columns whose values make the row's key
	columns      []string // the columns whose values are digested
}

// database is the PostgreSQL database a table is in ("" for MySQL).
func (q digestQuery) database(pg bool) string {
	if !pg {
		return ""
	}
	db, _, _ := strings.Cut(q.schema, ".")
	return db
}

// digestSQL is the statements that print a table's marker and its rows' digests.
func digestSQL(pg bool, q digestQuery) string {
	ident := mysqlIdent
	table := ident(q.schema) + "." + ident(q.name)
	md5 := func(col string) string { return "MD5(" + ident(col) + ")" }
	if pg {
		ident = pgQuoted
		_, nsp, _ := strings.Cut(q.schema, ".")
		table = ident(nsp) + "." + ident(q.name)
		md5 = func(col string) string { return "md5(t." + ident(col) + "::text)" }
	}
	keyParts := make([]string, len(q.key))
	for i, k := range q.key {
		keyParts[i] = "COALESCE(" + md5(k) + ", '-')"
	}
	key := "LEFT(MD5(CONCAT_WS(',', " + strings.Join(keyParts, ", ") + ")), 16)"
	order := "ORDER BY 1"
	if pg {
		order = "ORDER BY " + key + ` COLLATE "C"`
	}
	exprs := []string{key}
	for _, col := range q.columns {
		exprs = append(exprs, "COALESCE(LEFT("+md5(col)+", 16), '-')")
	}
	return fmt.Sprintf("SELECT 'table', %s, %s;\nSELECT %s FROM %s t %s;\n", quote(q.schema), quote(q.name), strings.Join(exprs, ", "), table, order)
}

// captureDigests digests every row of the dumped tables, whose columns and keys are recorded,
// into the backup's file databases/<name>.rows.zst.
func (c Dumps) captureDigests(ctx context.Context, w *snapshot.Writer, t target, entry *snapshot.Database) error {
	qs := make([]digestQuery, len(entry.Tables))
	for i, t := range entry.Tables {
		qs[i] = sourceDigestQuery(t)
	}
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		enc, err := zstd.NewWriter(pw)
		if err == nil {
			err = t.eng.digests(ctx, c, t, qs, enc)
			if cerr := enc.Close(); err == nil {
				err = cerr
			}
		}
		pw.CloseWithError(err)
		done <- err
	}()
	key, putErr := w.Put(ctx, "databases/"+t.item.Name+".rows.zst", pr)
	pr.CloseWithError(putErr)
	if err := <-done; err != nil {
		return err
	}
	if putErr != nil {
		return putErr
	}
	entry.RowDigests = key
	return nil
}

// sourceDigestQuery digests all of a table's columns, keyed by its primary key or, without one,
// by all its columns.
func sourceDigestQuery(t snapshot.Table) digestQuery {
	q := digestQuery{schema: t.Schema, name: t.Name, key: t.Key}
	for _, c := range t.Columns {
		q.columns = append(q.columns, c.Name)
	}
	if len(q.key) == 0 {
		q.key = q.columns
	}
	return q
}

// digestRow is one row of a digest stream.
type digestRow struct {
	key    string
	values []string
}

// digestReader reads a digest stream table by table.
type digestReader struct {
	sc     *bufio.Scanner
	peeked []string
	err    error
	eof    bool
}

func newDigestReader(r io.Reader) *digestReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	return &digestReader{sc: sc}
}

func (d *digestReader) peek() []string {
	for d.peeked == nil && !d.eof {
		switch {
		case !d.sc.Scan():
			d.eof, d.err = true, d.sc.Err()
		case d.sc.Text() != "":
			d.peeked = strings.Split(d.sc.Text(), "\t")
		}
	}
	return d.peeked
}

// table moves to the marker of table schema.name, skipping the rows and tables before it.
func (d *digestReader) table(schema, name string) error {
	for {
		l := d.peek()
		if l == nil {
			if d.err != nil {
				return d.err
			}
			return fmt.Errorf("no digests of table %s.%s", schema, name)
		}
		d.peeked = nil
		if len(l) == 3 && l[0] == "table" && l[1] == schema && l[2] == name {
			return nil
		}
	}
}

// row is the next row of the current table, or false at its end.
func (d *digestReader) row() (digestRow, bool) {
	l := d.peek()
	if l == nil || len(l) == 3 && l[0] == "table" {
		return digestRow{}, false
	}
	d.peeked = nil
	return digestRow{key: l[0], values: l[1:]}, true
}

// storedDigests opens a backup's row digests, checked against the manifest as they are read.
func storedDigests(ctx context.Context, r *snapshot.Reader, d snapshot.Database) (io.ReadCloser, error) {
	rc, err := r.Open(ctx, d.RowDigests)
	if err != nil {
		return nil, err
	}
	dec, err := zstd.NewReader(rc, zstd.WithDecoderConcurrency(1))
	if err != nil {
		rc.Close()
		return nil, fmt.Errorf("%s: %w", d.RowDigests, err)
	}
	return &decodedFile{dec: dec, rc: rc}, nil
}

type decodedFile struct {
	dec *zstd.Decoder
	rc  io.ReadCloser
}

func (f *decodedFile) Read(p []byte) (int, error) { return f.dec.Read(p) }
func (f *decodedFile) Close() error {
	f.dec.Close()
	return f.rc.Close()
}

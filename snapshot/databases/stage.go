package databases

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"regexp"
	"strings"
)

// stagingName is the schema a carry-back loads a dumped schema's tables into on the target's
// server, beside the target's own: ferry's prefix, the schema's name cut down and a digest of it,
// within MySQL's 64 characters.
func stagingName(schema string) string {
	sum := sha256.Sum256([]byte(schema))
	name := schema
	if len(name) > 40 {
		name = name[:40]
	}
	return "ferry_stage_" + name + "_" + hex.EncodeToString(sum[:4])
}

// stagingFilter passes on, of a mysqldump's SQL, only what creates the dump's tables and fills
// them, in staging schemas: CREATE DATABASE and USE of each dumped schema become those of its
// staging schema; CREATE TABLE, DROP TABLE IF EXISTS, INSERT, LOCK and UNLOCK TABLES on
// unqualified tables, DISABLE/ENABLE KEYS and session settings pass; everything else (views,
// triggers, routines, events, global settings, client commands and comments) is left out, so
// that loading it touches nothing but the staging schemas and runs nothing of the dump's code.
// A kept statement naming a table of another schema stops it.
type stagingFilter struct {
	scan   *sqlScanner
	rename map[string]string // dumped schema -> staging schema
	out    bytes.Buffer

	in      bool   // inside a statement (or a word that may begin one)
	buf     []byte // the statement's bytes until it is decided
	decided bool
	keep    bool
	err     error
}

// decideAt is how much of a statement decides whether it is kept: enough for the comments
// before its first (mysqldump's header) and its beginning.
const decideAt = 4096

func newStagingFilter(rename map[string]string) *stagingFilter {
	return &stagingFilter{scan: newSQLScanner("mysql"), rename: rename}
}

var (
	// MariaDB's dump of a system-versioned table's history sets system_versioning_insert_history
	// in a comment only MariaDB runs (/*M!...*/).
	keptRE = regexp.MustCompile(`(?is)^(?:CREATE\s+TABLE\s|DROP\s+TABLE\s+IF\s+EXISTS\s|INSERT\s+INTO\s|LOCK\s+TABLES\s|UNLOCK\s+TABLES\b|/\*!\d+\s+ALTER\s+TABLE\s|/\*M?!\d+\s+SET\s|SET\s)`)
	// unqualifiedRE is a kept table statement's beginning whose table has no schema.
	unqualifiedRE = regexp.MustCompile("(?is)^(?:CREATE\\s+TABLE|DROP\\s+TABLE\\s+IF\\s+EXISTS|INSERT\\s+INTO|LOCK\\s+TABLES|/\\*!\\d+\\s+ALTER\\s+TABLE)\\s+`(?:[^`]|``)+`(?:[^.`]|$)")
	globalRE      = regexp.MustCompile(`(?i)@@global\.|\bGLOBAL\s`)
	settingRE     = regexp.MustCompile(`(?is)^(?:SET\s|/\*M?!\d+\s+SET\s|UNLOCK\s)`)
	noiseRE       = regexp.MustCompile(`^(?:\s+|--[^\n]*\n|#[^\n]*\n|/\*M!999999\\-[^*]*\*/|/\*[^!M*][^*]*\*+(?:[^/*][^*]*\*+)*/)*`)
	createDBRE    = regexp.MustCompile("(?is)^CREATE\\s+DATABASE\\s.*?`((?:[^`]|``)+)`")
)

func (f *stagingFilter) Write(p []byte) (int, error) {
	for _, b := range p {
		if f.err != nil {
			return 0, f.err
		}
		f.byte(b)
	}
	return len(p), f.err
}

func (f *stagingFilter) byte(b byte) {
	s := f.scan
	ended := s.Statements
	s.byte(b)
	inNow := s.open || len(s.word) > 0
	switch {
	case s.Statements != ended: // b ended a statement
		if !f.in {
			f.buf, f.decided, f.keep = f.buf[:0], false, false
		}
		f.add(b)
		f.finish()
	case inNow:
		if !f.in {
			f.in, f.buf, f.decided, f.keep = true, f.buf[:0], false, false
		}
		f.add(b)
	case f.in: // a word that began a client command (DELIMITER), not a statement
		f.in = false
	}
}

func (f *stagingFilter) add(b byte) {
	if f.decided {
		if f.keep {
			f.out.WriteByte(b)
		}
		return
	}
	f.buf = append(f.buf, b)
	if len(f.buf) >= decideAt {
		f.decide(false)
	}
}

// decide keeps or leaves out the statement whose beginning is buf (all of it when whole).
func (f *stagingFilter) decide(whole bool) {
	f.decided = true
	// The scanner counts comments before a statement in it (and MariaDB's sandbox command,
	// which its client reads as a line of its own): left out.
	skip := len(noiseRE.Find(f.buf))
	head := f.buf[skip:]
	switch {
	case whole && useRE.Match(head):
		m := useRE.FindSubmatch(head)
		f.rewrite("USE", strings.ReplaceAll(string(m[1]), "``", "`"))
		return
	case whole && createDBRE.Match(head):
		m := createDBRE.FindSubmatch(head)
		f.rewrite("CREATE DATABASE", strings.ReplaceAll(string(m[1]), "``", "`"))
		return
	case !keptRE.Match(head) || globalRE.Match(head) || string(f.scan.delim) != ";":
		f.keep = false
		return
	case settingRE.Match(head):
	case !unqualifiedRE.Match(head):
		f.err = fmt.Errorf("the dump has a statement on a table of another schema (%s): not loaded into staging", statement{head: head, Bytes: int64(len(head))}.Text())
		return
	}
	f.keep = true
	f.out.Write(head)
}

func (f *stagingFilter) rewrite(verb, schema string) {
	staging, ok := f.rename[schema]
	if !ok {
		f.err = fmt.Errorf("the dump holds schema %s, which its manifest does not list", schema)
		return
	}
	f.keep = false // the statement's own bytes are replaced
	fmt.Fprintf(&f.out, "%s `%s`;\n", verb, strings.ReplaceAll(staging, "`", "``"))
}

func (f *stagingFilter) finish() {
	if !f.decided {
		f.decide(true)
	}
	if f.keep {
		f.out.WriteByte('\n')
	}
	f.in, f.decided = false, false
}

// stagingReader reads a dump's SQL through a stagingFilter.
type stagingReader struct {
	src io.Reader
	f   *stagingFilter
	eof bool
	buf []byte
}

func newStagingReader(src io.Reader, rename map[string]string) *stagingReader {
	return &stagingReader{src: src, f: newStagingFilter(rename), buf: make([]byte, 64<<10)}
}

func (r *stagingReader) Read(p []byte) (int, error) {
	for r.f.out.Len() == 0 {
		if r.f.err != nil {
			return 0, r.f.err
		}
		if r.eof {
			return 0, io.EOF
		}
		n, err := r.src.Read(r.buf)
		if _, werr := r.f.Write(r.buf[:n]); werr != nil {
			return 0, werr
		}
		if err == io.EOF {
			r.eof = true
		} else if err != nil {
			return 0, err
		}
	}
	return r.f.out.Read(p)
}

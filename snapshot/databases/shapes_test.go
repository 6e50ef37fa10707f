package databases

import (
	"slices"
	"strings"
	"testing"
)

func TestMariaDBAtLeast(t *testing.T) {
	for _, c := range []struct {
		version string
		want    bool
	}{
		{"10.11.14-MariaDB-0+deb12u2", true},
		{"11.4.2-MariaDB", true},
		{"10.11.0-MariaDB-log", true},
		{"10.6.18-MariaDB-1:10.6.18+maria~ubu2004", false},
		{"10.3.39-MariaDB", false},
		{"8.0.36", false},
		{"8.4.0-MySQL", false},
		{"MariaDB", false},
	} {
		if got := mariaDBAtLeast(c.version, 10, 11); got != c.want {
			t.Errorf("mariaDBAtLeast(%q, 10, 11) = %v, want %v", c.version, got, c.want)
		}
	}
}

// TestPostgresDefaultDatabaseDump: the default database's dump connects psql to it and keeps it
// (no --create: no DROP DATABASE of the database psql may be connected to); the others' drop and
// recreate theirs.
func TestPostgresDefaultDatabaseDump(t *testing.T) {
	for _, c := range []struct {
		db     string
		create bool
	}{{"postgres", false}, {"appdb", true}, {"postgres_app", true}} {
		args := pgDumpArgs(c.db)
		if slices.Contains(args, "--create") != c.create || !slices.Contains(args, "--clean") || !slices.Contains(args, "--dbname="+c.db) {
			t.Errorf("pg_dump's arguments for database %s: %v", c.db, args)
		}
	}
	if pgConnectDefault != "\\connect postgres\n" {
		t.Errorf("the dump's line connecting to the default database is %q", pgConnectDefault)
	}
	s := newSQLScanner("postgresql")
	if _, err := s.Write([]byte(pgConnectDefault)); err != nil || s.schema != "postgres" {
		t.Errorf("the dump's scanner reads %q as a connection to %q (%v)", pgConnectDefault, s.schema, err)
	}
}

// TestPostgresChecksumNamesTheRow: the checksum's row is the table's whole row whatever its
// columns are called: the alias is qualified with a star, never a bare name a column may take.
func TestPostgresChecksumNamesTheRow(t *testing.T) {
	if !strings.HasSuffix(pgRowText, ".*)::text") || !strings.HasPrefix(pgRowText, "("+pgRowAlias+".") {
		t.Fatalf("the row's text is %q", pgRowText)
	}
}

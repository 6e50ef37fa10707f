package databases

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
)

func TestDumpNeeds(t *testing.T) {
	pgDump := `--
-- PostgreSQL database dump
--
SET statement_timeout = 0;
SELECT pg_catalog.set_config('search_path', '', false);
DROP DATABASE IF EXISTS app;
CREATE DATABASE app WITH TEMPLATE = template0 ENCODING = 'UTF8' LOCALE_PROVIDER = libc LOCALE = 'C';
ALTER DATABASE app OWNER TO app_owner;
\connect app
CREATE EXTENSION IF NOT EXISTS pgcrypto WITH SCHEMA public;
CREATE EXTENSION IF NOT EXISTS "uuid-ossp" WITH SCHEMA public;
CREATE SCHEMA billing;
ALTER SCHEMA billing OWNER TO "Billing Admin";
CREATE FUNCTION public.f() RETURNS text
    LANGUAGE sql
    AS $$ SELECT 'ALTER TABLE x OWNER TO not_a_role;' $$;
ALTER FUNCTION public.f() OWNER TO app_owner;
CREATE TABLE public.items (id integer NOT NULL, note text);
ALTER TABLE public.items OWNER TO app_owner;
COPY public.items (id, note) FROM stdin;
1	ALTER TABLE public.items OWNER TO row_text;
2	GRANT ALL ON TABLE x TO row_text
\.
CREATE POLICY own_rows ON public.items FOR SELECT TO reporting USING ((note <> 'x'::text));
CREATE POLICY "allowed to see" ON public.items USING ((note <> 'back to school'::text));
REVOKE USAGE ON SCHEMA public FROM PUBLIC;
GRANT ALL ON SCHEMA public TO PUBLIC;
GRANT SELECT ON TABLE public.items TO reader;
GRANT SELECT,INSERT ON TABLE public.items TO writer, "Mixed Case" WITH GRANT OPTION;
REVOKE ALL ON TABLE public.items FROM revoked;
SET SESSION AUTHORIZATION 'grantor';
GRANT SELECT ON TABLE public.items TO CURRENT_USER;
RESET SESSION AUTHORIZATION;
ALTER DEFAULT PRIVILEGES FOR ROLE app_owner IN SCHEMA public GRANT SELECT ON TABLES TO default_reader;
ALTER DEFAULT PRIVILEGES FOR ROLE "Billing Admin" IN SCHEMA billing REVOKE ALL ON TABLES FROM default_revoked;
`
	mysqlDump := "/*M!999999\\- enable the sandbox mode */ \n" +
		"-- MariaDB dump\n" +
		"/*!40101 SET @OLD_CHARACTER_SET_CLIENT=@@CHARACTER_SET_CLIENT */;\n" +
		"INSERT INTO `t` VALUES (1,'CREATE DEFINER=`row`@`%` VIEW v AS SELECT 1');\n" +
		"/*!50001 CREATE ALGORITHM=UNDEFINED */\n/*!50013 DEFINER=`app`@`%` SQL SECURITY DEFINER */\n/*!50001 VIEW `v` AS select 1 AS `1` */;\n" +
		"/*!50001 CREATE ALGORITHM=UNDEFINED */\n/*!50013 DEFINER=`invoker`@`%` SQL SECURITY INVOKER */\n/*!50001 VIEW `w` AS select 1 AS `1` */;\n" +
		"DELIMITER ;;\n" +
		"/*!50003 CREATE*/ /*!50017 DEFINER=`trig``ger`@`10.0.%`*/ /*!50003 TRIGGER `t_ai` AFTER INSERT ON `t` FOR EACH ROW INSERT INTO audit VALUES (NEW.id) */;;\n" +
		"CREATE DEFINER=`root`@`localhost` PROCEDURE `p`()\nSELECT 1 ;;\n" +
		"/*!50106 CREATE*/ /*!50117 DEFINER='events'@'localhost'*/ /*!50106 EVENT `e` ON SCHEDULE EVERY 1 DAY DO DELETE FROM t */ ;;\n" +
		"DELIMITER ;\n"
	scan := func(engine, dump string) dumpNeeds {
		s := newSQLScanner(engine)
		s.needs = &dumpNeeds{}
		s.Write([]byte(dump))
		if p := s.complete(); p != "" {
			t.Fatalf("%s dump: %s", engine, p)
		}
		return *s.needs
	}
	keys := func(m map[string]bool) string { return strings.Join(slices.Sorted(maps.Keys(m)), ",") }

	pg := scan("postgresql", pgDump)
	for what, got := range map[string][2]string{
		"owners":     {keys(pg.owners), "Billing Admin,app_owner"},
		"grantees":   {keys(pg.grantees), "Mixed Case,default_reader,default_revoked,reader,reporting,revoked,writer"},
		"sessions":   {keys(pg.sessions), "grantor"},
		"extensions": {keys(pg.extensions), "pgcrypto,uuid-ossp"},
	} {
		if got[0] != got[1] {
			t.Errorf("PostgreSQL %s: %q, want %q", what, got[0], got[1])
		}
	}
	my := scan("mysql", mysqlDump)
	var definers []string
	for a := range my.definers {
		definers = append(definers, a.String())
	}
	slices.Sort(definers)
	if got, want := strings.Join(definers, " "), "'app'@'%' 'events'@'localhost' 'root'@'localhost' 'trig`ger'@'10.0.%'"; got != want {
		t.Errorf("MySQL definers: %s, want %s", got, want)
	}
	if len(my.owners)+len(my.grantees) > 0 || len(pg.definers) > 0 {
		t.Errorf("one engine's accounts found in the other's dump: %+v %+v", my, pg)
	}

	// A statement cut at needLimit: its last words may be a role's name cut short.
	var cut dumpNeeds
	cut.note(true, []byte("GRANT SELECT ON TABLE public.items TO rea"), true)
	cut.note(true, []byte("ALTER TABLE public.items OWNER TO ow"), true)
	cut.note(true, []byte("ALTER DEFAULT PRIVILEGES FOR ROLE app_owner IN SCHEMA public GRANT SELECT ON TABLES TO def"), true)
	if got := keys(cut.grantees) + "|" + keys(cut.owners); got != "|app_owner" {
		t.Errorf("from cut statements: grantees|owners %q, want only the owner named at the start", got)
	}
}

func TestHasRoles(t *testing.T) {
	for _, c := range []struct {
		grant string
		want  bool
	}{
		{"GRANT `app_writer`@`%` TO `app`@`%`", true},
		{"GRANT `admin` TO `app`@`%`", true},
		{"GRANT USAGE ON *.* TO `app`@`%`", false},
		{"GRANT SELECT ON `shop`.* TO `app`@`%`", false},
	} {
		if got := hasRoles([][]string{{c.grant}}); got != c.want {
			t.Errorf("hasRoles(%q) = %v, want %v", c.grant, got, c.want)
		}
	}
}

func TestMySQLNames(t *testing.T) {
	for in, want := range map[string]string{"app": "X'617070'", "o'b": "X'6f2762'", `a\b`: "X'615c62'"} {
		if got := mysqlString(in); got != want {
			t.Errorf("mysqlString(%q) = %s, want %s", in, got, want)
		}
	}
	for in, want := range map[string]string{"`app`": "app", "`a``b`": "a`b", "'o''b'": "o'b", `'a\'b'`: "a'b", `'a\\b'`: `a\b`, "bare": "bare"} {
		if got := mysqlUnquote(in); got != want {
			t.Errorf("mysqlUnquote(%s) = %q, want %q", in, got, want)
		}
	}
}

func TestMayDefineForOthers(t *testing.T) {
	for _, c := range []struct {
		grants []string
		want   bool
	}{
		{[]string{"GRANT ALL PRIVILEGES ON *.* TO `root`@`localhost` IDENTIFIED BY PASSWORD '*hash' WITH GRANT OPTION"}, true},
		{[]string{"GRANT USAGE ON *.* TO `app`@`%`", "GRANT SELECT, INSERT, TRIGGER ON `shop`.* TO `app`@`%`"}, false},
		{[]string{"GRANT USAGE ON *.* TO `app`@`%`", "GRANT ALL PRIVILEGES ON `shop`.* TO `app`@`%`"}, false},
		{[]string{"GRANT RELOAD, SUPER, PROCESS ON *.* TO `ops`@`%`"}, true},
		{[]string{"GRANT SET USER ON *.* TO `ops`@`%`"}, true},
		{[]string{"GRANT USAGE ON *.* TO `app`@`%`", "GRANT SET_USER_ID ON *.* TO `app`@`%`"}, true},
		{[]string{"GRANT SELECT ON `super`.* TO `app`@`%`"}, false},
		{nil, false},
	} {
		var rows [][]string
		for _, g := range c.grants {
			rows = append(rows, []string{g})
		}
		if got := mayDefineForOthers(rows); got != c.want {
			t.Errorf("mayDefineForOthers(%q) = %v, want %v", c.grants, got, c.want)
		}
	}
}

func TestMySQLDenied(t *testing.T) {
	for _, c := range []struct {
		msg  string
		want bool
	}{
		{`exec ["sh" "-c" "..."] in pod ns/mysql-0: command terminated with exit code 1: ERROR 1142 (42000) at line 1: SELECT command denied to user "(9 bytes not shown)" for table "(4 bytes not shown)"`, true},
		{"ERROR 1044 (42000): Access denied for user to database", true},
		{"ERROR 1227 (42000) at line 1: Access denied; you need (at least one of) the SUPER privilege(s)", true},
		{"error dialing backend: EOF", false},
		{"stream error: stream ID 3; INTERNAL_ERROR; received from peer", false},
		{"ERROR 2013 (HY000): Lost connection to server during query", false},
		{"ERROR 1045 (28000): Access denied for user (using password: YES)", false}, // not let in at all: the check cannot run
	} {
		if got := mysqlDenied(errors.New(c.msg)); got != c.want {
			t.Errorf("mysqlDenied(%q) = %t, want %t", c.msg, got, c.want)
		}
	}
}

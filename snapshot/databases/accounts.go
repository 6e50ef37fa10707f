package databases

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/snapshot"
	"k8s.io/client-go/dynamic"
)

// dumpNeeds is what a dump needs of the target's server beyond the data it brings: the accounts
// its statements name and the PostgreSQL extensions it creates. A dump's check collects them
// (sqlScanner.needs), and load refuses a dump whose needs the target's server does not meet
// (engine.checkNeeds) before anything of it runs; a migration's preflight checks a dump of the
// source's schemas the same way (PreflightTarget). A PostgreSQL load stopped at such a statement
// has dropped the target's database by then, a MySQL one has replaced the tables before it, and a
// MySQL trigger whose definer the server lacks loads with a mere warning and fails only when the
// application writes.
type dumpNeeds struct {
	// PostgreSQL roles: given objects (OWNER TO, ALTER DEFAULT PRIVILEGES FOR ROLE), granted or
	// revoked privileges, or run as (SET SESSION AUTHORIZATION).
	owners, grantees, sessions map[string]bool
	extensions                 map[string]bool
	// definers are the MySQL accounts triggers, events and definer-security views and routines
	// run as.
	definers map[mysqlAccount]bool
}

// mysqlAccount is a MySQL or MariaDB account, 'user'@'host'.
type mysqlAccount struct{ user, host string }

func (a mysqlAccount) String() string { return quote(a.user) + "@" + quote(a.host) }

// needLimit is how much of a statement's beginning names the accounts it needs: what a longer
// statement names after it is not checked, its load failing as before.
const needLimit = 4096

var (
	// pg_dump quotes every name but lower-case ASCII ones.
	pgIdent     = `(?:"(?:[^"]|"")+"|[A-Za-z_][A-Za-z0-9_$]*)`
	pgIdentList = pgIdent + `(?:\s*,\s*` + pgIdent + `)*`
	pgIdentRE   = regexp.MustCompile(pgIdent)
	// These read role lists that end their statements: not from a statement cut at needLimit.
	pgOwnerRE   = regexp.MustCompile(`(?is)^ALTER\s.*\sOWNER\s+TO\s+(` + pgIdent + `)$`)
	pgGrantRE   = regexp.MustCompile(`(?is)^(?:GRANT|ALTER\s+DEFAULT\s+PRIVILEGES\s.*\sGRANT)\s.*\sTO\s+(` + pgIdentList + `)(?:\s+WITH\s+(?:GRANT|ADMIN)\s+OPTION)?(?:\s+GRANTED\s+BY\s+` + pgIdent + `)?$`)
	pgRevokeRE  = regexp.MustCompile(`(?is)^(?:REVOKE|ALTER\s+DEFAULT\s+PRIVILEGES\s.*\sREVOKE)\s.*\sFROM\s+(` + pgIdentList + `)(?:\s+(?:CASCADE|RESTRICT))?$`)
	pgSessionRE = regexp.MustCompile(`(?is)^SET\s+SESSION\s+AUTHORIZATION\s+('(?:[^']|'')*'|` + pgIdent + `)$`)
	// These name theirs at a statement's start.
	pgForRoleRE = regexp.MustCompile(`(?is)^ALTER\s+DEFAULT\s+PRIVILEGES\s+FOR\s+(?:ROLE|USER)\s+(` + pgIdentList + `)\s`)
	// pgPolicyRE is pg_dump's CREATE POLICY name ON table [AS kind] [FOR command] TO roles; a
	// policy of PUBLIC has no TO.
	pgPolicyRE = regexp.MustCompile(`(?is)^CREATE\s+POLICY\s+` + pgIdent + `\s+ON\s+` + pgIdent + `(?:\.` + pgIdent + `)?(?:\s+AS\s+\w+)?(?:\s+FOR\s+\w+)?\s+TO\s+(` + pgIdentList + `)(?:\s|$)`)
	pgExtRE    = regexp.MustCompile(`(?is)^CREATE\s+EXTENSION\s+(?:IF\s+NOT\s+EXISTS\s+)?(` + pgIdent + `)`)
	// mysqlDefinerRE is the DEFINER of mysqldump's CREATE VIEW, TRIGGER, PROCEDURE, FUNCTION and
	// EVENT, inside its versioned comments or not.
	mysqlDefinerRE = regexp.MustCompile("(?is)^(?:/\\*!\\d+\\s*)?CREATE(?:\\s+OR\\s+REPLACE)?(?:\\s+ALGORITHM\\s*=\\s*\\w+)?\\s*(?:\\*/\\s*)?(?:/\\*!\\d+\\s*)?DEFINER\\s*=\\s*" +
		"(`(?:[^`]|``)*`|'(?:[^'\\\\]|''|\\\\.)*'|[A-Za-z0-9_$]+)@(`(?:[^`]|``)*`|'(?:[^'\\\\]|''|\\\\.)*'|[A-Za-z0-9_$.%-]+)")
	// mysqlInvokerRE marks a view or routine that runs with its caller's privileges, whose
	// definer need not exist.
	mysqlInvokerRE = regexp.MustCompile(`(?i)\bSQL\s+SECURITY\s+INVOKER\b`)
)

// pgRoleWords are the words a grantee or owner may be that are no role.
var pgRoleWords = map[string]bool{"public": true, "current_user": true, "session_user": true, "current_role": true, "default": true}

// note records what a statement of the dump needs; text is its beginning, cut says whether the
// statement goes on after it.
func (n *dumpNeeds) note(pg bool, text []byte, cut bool) {
	if !pg {
		text = text[len(noiseRE.Find(text)):] // the comments that end no statement of their own
		if m := mysqlDefinerRE.FindSubmatch(text); m != nil && !mysqlInvokerRE.Match(text) {
			n.definers = addTo(n.definers, mysqlAccount{user: mysqlUnquote(string(m[1])), host: mysqlUnquote(string(m[2]))})
		}
		return
	}
	roles := func(set *map[string]bool, list []byte) {
		for _, id := range pgIdentRE.FindAll(list, -1) {
			if name, quoted := pgUnquote(string(id)); quoted || !pgRoleWords[strings.ToLower(name)] {
				*set = addTo(*set, name)
			}
		}
	}
	if m := pgForRoleRE.FindSubmatch(text); m != nil {
		roles(&n.owners, m[1])
	}
	if m := pgExtRE.FindSubmatch(text); m != nil {
		name, _ := pgUnquote(string(m[1]))
		n.extensions = addTo(n.extensions, name)
	}
	if m := pgPolicyRE.FindSubmatch(text); m != nil && (!cut || len(m[0]) < len(text)) {
		roles(&n.grantees, m[1])
	}
	if cut {
		return
	}
	switch {
	case pgOwnerRE.Match(text):
		roles(&n.owners, pgOwnerRE.FindSubmatch(text)[1])
	case pgGrantRE.Match(text):
		roles(&n.grantees, pgGrantRE.FindSubmatch(text)[1])
	case pgRevokeRE.Match(text):
		roles(&n.grantees, pgRevokeRE.FindSubmatch(text)[1])
	case pgSessionRE.Match(text):
		s := string(pgSessionRE.FindSubmatch(text)[1])
		if strings.HasPrefix(s, "'") {
			n.sessions = addTo(n.sessions, strings.ReplaceAll(s[1:len(s)-1], "''", "'"))
		} else {
			roles(&n.sessions, []byte(s))
		}
	}
}

func addTo[K comparable](set map[K]bool, k K) map[K]bool {
	if set == nil {
		set = map[K]bool{}
	}
	set[k] = true
	return set
}

// pgUnquote is a PostgreSQL identifier's name, and whether it was quoted.
func pgUnquote(id string) (string, bool) {
	if len(id) >= 2 && id[0] == '"' {
		return strings.ReplaceAll(id[1:len(id)-1], `""`, `"`), true
	}
	return id, false
}

// mysqlUnquote is a MySQL name or string as mysqldump writes it: backquoted, single-quoted or bare.
func mysqlUnquote(s string) string {
	switch {
	case len(s) >= 2 && s[0] == '`':
		return strings.ReplaceAll(s[1:len(s)-1], "``", "`")
	case len(s) >= 2 && s[0] == '\'':
		var b strings.Builder
		in := s[1 : len(s)-1]
		for i := 0; i < len(in); i++ {
			switch {
			case in[i] == '\\' && i+1 < len(in):
				i++
			case in[i] == '\'' && i+1 < len(in) && in[i+1] == '\'':
				i++
			}
			b.WriteByte(in[i])
		}
		return b.String()
	}
	return s
}

// mysqlString is s as a MySQL string literal, in hex: the same whatever the server's escaping
// (NO_BACKSLASH_ESCAPES).
func mysqlString(s string) string {
	return "X'" + hex.EncodeToString([]byte(s)) + "'"
}

// unmet is what of a dump's needs a target's server does not meet.
type unmet struct {
	// missing are roles, accounts and extensions the server lacks. Objects restored before the
	// databases may make them (an operator's users), so a preflight only warns of them.
	missing []string
	// refused is what the dump does that the user may not.
	refused []string
	// unsure is what could not be checked.
	unsure []string
}

// refusal is the error of a load the target's server cannot take, or nil.
func (u unmet) refusal() error {
	if len(u.missing)+len(u.refused) == 0 {
		return nil
	}
	return errors.New("the target's server cannot take the dump: " + strings.Join(append(slices.Clone(u.missing), u.refused...), "; "))
}

// pgOwnershipRoles are roles of the server itself that a dump may give objects to.
var pgOwnershipRoles = map[string]bool{"pg_database_owner": true}

// checkNeeds of PostgreSQL: roles the dump names that the server lacks, extensions it cannot
// create, and, for a user that is not a superuser, a database it may not recreate (CREATEDB,
// having its owner's privileges where it exists), objects it may not give to their owners (PG
// 16: SET of each; before: a member), and extensions that are not trusted.
func (postgres) checkNeeds(ctx context.Context, c Dumps, t target, d snapshot.Database, n dumpNeeds) (unmet, error) {
	named := map[string]bool{}
	for _, set := range []map[string]bool{n.owners, n.grantees, n.sessions} {
		maps.Copy(named, set)
	}
	var script strings.Builder
	// The names below are standard strings, whatever the server's default.
	script.WriteString("SET standard_conforming_strings = on;\n")
	script.WriteString("SELECT 'self', rolsuper, rolcreatedb FROM pg_roles WHERE rolname = current_user;\n")
	list := func(names []string) string {
		quoted := make([]string, len(names))
		for i, name := range names {
			quoted[i] = quote(name)
		}
		return strings.Join(quoted, ", ")
	}
	if len(named) > 0 {
		fmt.Fprintf(&script, "SELECT 'role', rolname, pg_has_role(current_user, oid, CASE WHEN current_setting('server_version_num')::int >= 160000 THEN 'SET' ELSE 'MEMBER' END) FROM pg_roles WHERE rolname IN (%s);\n",
			list(slices.Sorted(maps.Keys(named))))
	}
	fmt.Fprintf(&script, "SELECT 'db', datname, pg_has_role(current_user, datdba, 'USAGE') FROM pg_database WHERE datname IN (%s);\n", list(d.Schemas))
	if len(n.extensions) > 0 {
		fmt.Fprintf(&script, "SELECT 'ext', name, bool_or(trusted) FROM pg_available_extension_versions WHERE name IN (%s) GROUP BY name;\n", list(slices.Sorted(maps.Keys(n.extensions))))
	}
	rows, err := c.pgQuery(ctx, t.item, t.cfg.Container, t.cred, "postgres", script.String())
	if err != nil {
		return unmet{}, fmt.Errorf("read the roles and databases of the server: %w", err)
	}
	var super, createdb bool
	member, owns, trusted := map[string]bool{}, map[string]bool{}, map[string]bool{}
	found, available := map[string]bool{}, map[string]bool{}
	for _, r := range rows {
		if len(r) != 3 {
			continue
		}
		switch r[0] {
		case "self":
			super, createdb = r[1] == "t", r[2] == "t"
		case "role":
			found[r[1]], member[r[1]] = true, r[2] == "t"
		case "db":
			owns[r[1]] = r[2] == "t"
		case "ext":
			available[r[1]], trusted[r[1]] = true, r[2] == "t"
		}
	}
	var u unmet
	var missing []string
	for _, role := range slices.Sorted(maps.Keys(named)) {
		if !found[role] {
			missing = append(missing, role+" ("+pgRoleUse(n, role)+")")
		}
	}
	if len(missing) > 0 {
		u.missing = append(u.missing, "roles the dump names are not on the target's server: "+strings.Join(missing, ", ")+
			"; create them there first (roles that may not log in will do for ownership and grants)")
	}
	var noExt, untrusted []string
	for _, ext := range slices.Sorted(maps.Keys(n.extensions)) {
		switch {
		case !available[ext]:
			noExt = append(noExt, ext)
		case !super && !trusted[ext]:
			untrusted = append(untrusted, ext)
		}
	}
	if len(noExt) > 0 {
		u.missing = append(u.missing, "extensions the dump creates are not available on the target's server: "+strings.Join(noExt, ", "))
	}
	if super {
		return u, nil
	}
	user := t.cred.user
	if !createdb {
		u.refused = append(u.refused, fmt.Sprintf("role %s may not create databases (it is no superuser and lacks CREATEDB), and the dump drops and recreates %s; restore with a superuser's credentials or grant it CREATEDB",
			user, strings.Join(d.Schemas, ", ")))
	}
	for _, db := range d.Schemas {
		if isOwner, exists := owns[db]; exists && !isOwner {
			u.refused = append(u.refused, fmt.Sprintf("role %s does not own database %s on the target, which the dump drops", user, db))
		}
	}
	var notMember []string
	for _, role := range slices.Sorted(maps.Keys(n.owners)) {
		if found[role] && !member[role] && !pgOwnershipRoles[role] {
			notMember = append(notMember, role)
		}
	}
	if len(notMember) > 0 {
		u.refused = append(u.refused, fmt.Sprintf("role %s may not give objects to %s (it would need to be a member)", user, strings.Join(notMember, ", ")))
	}
	for _, role := range slices.Sorted(maps.Keys(n.sessions)) {
		if role != user {
			u.refused = append(u.refused, fmt.Sprintf("the dump runs part of itself as role %s (SET SESSION AUTHORIZATION), which only a superuser may", role))
		}
	}
	if len(untrusted) > 0 {
		u.refused = append(u.refused, fmt.Sprintf("role %s may not create extensions %s, which only a superuser may (they are not trusted)", user, strings.Join(untrusted, ", ")))
	}
	return u, nil
}

// pgRoleUse says what a dump does with a role it names.
func pgRoleUse(n dumpNeeds, role string) string {
	var uses []string
	if n.owners[role] {
		uses = append(uses, "owns objects")
	}
	if n.grantees[role] {
		uses = append(uses, "granted privileges")
	}
	if n.sessions[role] {
		uses = append(uses, "runs part of the dump")
	}
	return strings.Join(uses, ", ")
}

// checkNeeds of MySQL: accounts the dump's triggers, events and definer-security views and
// routines run as that the server lacks (it creates them with a warning, and they fail when
// used), and, for definers other than the user, whether the user may create objects for other
// accounts (SUPER, MariaDB's SET USER, MySQL's SET_USER_ID or SET_ANY_DEFINER): without, the
// load would stop at the first such statement, the tables before it replaced. Whether the
// accounts exist cannot be told by a user that may not read the server's accounts, nor the
// privileges of one that has roles: that is unsure.
func (mysql) checkNeeds(ctx context.Context, c Dumps, t target, d snapshot.Database, n dumpNeeds) (unmet, error) {
	var u unmet
	if len(n.definers) == 0 {
		return u, nil
	}
	accounts := slices.SortedFunc(maps.Keys(n.definers), func(a, b mysqlAccount) int { return strings.Compare(a.String(), b.String()) })
	// SHOW GRANTS may show password hashes: its rows are matched here and never shown.
	rows, err := c.query(ctx, t.item, t.cfg.Container, t.cred, "SELECT CURRENT_USER(); SHOW GRANTS;")
	if err != nil {
		return u, fmt.Errorf("read the user's privileges: %w", err)
	}
	if len(rows) > 0 && len(rows[0]) == 1 {
		self := rows[0][0]
		var others []string
		for _, a := range accounts {
			if !strings.EqualFold(a.user+"@"+a.host, self) {
				others = append(others, a.String())
			}
		}
		switch grants := rows[1:]; {
		case len(others) == 0 || mayDefineForOthers(grants):
		case hasRoles(grants):
			u.unsure = append(u.unsure, fmt.Sprintf("whether user %s may create the dump's views, triggers, routines or events for %s (which takes SUPER, SET USER or SET_USER_ID) is not checked: it has roles",
				t.cred.user, strings.Join(others, ", ")))
		default:
			u.refused = append(u.refused, fmt.Sprintf("the dump's views, triggers, routines or events run as %s, and user %s may not create them for other accounts (it lacks SUPER, SET USER or SET_USER_ID); restore with an administrator's credentials",
				strings.Join(others, ", "), t.cred.user))
		}
	}
	pairs := make([]string, len(accounts))
	for i, a := range accounts {
		pairs[i] = "(" + mysqlString(a.user) + ", " + mysqlString(a.host) + ")"
	}
	rows, err = c.query(ctx, t.item, t.cfg.Container, t.cred, "SELECT user, host FROM mysql.user WHERE (user, host) IN ("+strings.Join(pairs, ", ")+");")
	if err != nil && !mysqlDenied(err) {
		// Not the server's refusal (an exec that broke off): unchecked is not unsure.
		return u, fmt.Errorf("read the server's accounts: %w", err)
	}
	if err != nil {
		u.unsure = append(u.unsure, fmt.Sprintf("user %s may not read the server's accounts: whether those the dump's views, triggers, routines or events run as exist is not checked", t.cred.user))
		return u, nil
	}
	found := map[mysqlAccount]bool{}
	for _, r := range rows {
		if len(r) == 2 {
			found[mysqlAccount{user: r[0], host: strings.ToLower(r[1])}] = true
		}
	}
	var missing []string
	for _, a := range accounts {
		if !found[mysqlAccount{user: a.user, host: strings.ToLower(a.host)}] {
			missing = append(missing, a.String())
		}
	}
	if len(missing) > 0 {
		u.missing = append(u.missing, "the dump's triggers, events, views or routines run as accounts the target's server lacks: "+strings.Join(missing, ", ")+
			"; create them there first (ACCOUNT LOCK will do) or they fail when used")
	}
	return u, nil
}

// mysqlDeniedRE is the client's message of a statement the server refused to the user: a table
// (1142), a column (1143), a database (1044) or a privilege (1227) it may not use, or a view
// over tables it may not read (1356: MariaDB's mysql.user over mysql.global_priv).
var mysqlDeniedRE = regexp.MustCompile(`\bERROR (1142|1143|1044|1227|1356) \(`)

// mysqlDenied says whether err is the server's refusal of a statement to the user.
func mysqlDenied(err error) bool { return mysqlDeniedRE.MatchString(err.Error()) }

// defineForOthersRE is a global grant (ON *.*) that lets a user name another account as an
// object's DEFINER.
var defineForOthersRE = regexp.MustCompile(`(?i)^GRANT\s+(?:.*[\s,])?(?:ALL\s+PRIVILEGES|SUPER|SET\s+USER|SET_USER_ID|SET_ANY_DEFINER)(?:[\s,].*)?\s+ON\s+\*\.\*\s+TO\s`)

// roleGrantRE is a grant of a role (no ON clause), whose privileges SHOW GRANTS does not list.
var roleGrantRE = regexp.MustCompile("(?i)^GRANT\\s+[`'][^\\s]*\\s+TO\\s")

// mayDefineForOthers says whether the rows of SHOW GRANTS give the user a privilege to create
// objects for other accounts. Grants through roles are not followed (hasRoles).
func mayDefineForOthers(grants [][]string) bool {
	for _, g := range grants {
		if len(g) > 0 && defineForOthersRE.MatchString(g[0]) {
			return true
		}
	}
	return false
}

// hasRoles says whether the rows of SHOW GRANTS grant the user roles.
func hasRoles(grants [][]string) bool {
	for _, g := range grants {
		if len(g) > 0 && !strings.Contains(strings.ToUpper(g[0]), " ON ") && roleGrantRE.MatchString(g[0]) {
			return true
		}
	}
	return false
}

// PreflightTarget checks, before a migration stops anything, that the target's servers can take
// the dumps of the plan's databases: it dumps each one's schemas from the source without rows
// (source holds the source's clients) and checks their needs on the target (c, with the
// migration's mapping), as a restore checks its dump's. What the user may not do is blocking;
// roles, accounts and extensions the server lacks are warnings, as objects restored before the
// databases may make them; so is what it cannot check (a database that does not run on the
// target yet, as ferry makes it there; a server that does not answer): the restore checks those.
func (c Dumps) PreflightTarget(ctx context.Context, source Dumps) ([]plans.Finding, error) {
	if source.Plan == nil || len(source.Plan.Databases) == 0 {
		return nil, nil
	}
	dyn, err := c.dynamicClient()
	if err != nil {
		return nil, err
	}
	var findings []plans.Finding
	for _, item := range source.Plan.Databases {
		if !item.Found || item.Pod == "" {
			continue // the backup skips it, saying why
		}
		finding := func(severity, message string) {
			findings = append(findings, plans.Finding{Severity: severity, Subject: "database " + item.Name, Message: message})
		}
		u, err := c.preflightOne(ctx, dyn, source, item)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil {
			finding(plans.Warning, "the accounts its dump needs are checked when it is restored, not now: "+err.Error())
		}
		for _, m := range u.missing {
			finding(plans.Warning, m+" (unless objects the restore makes first make them; else the restore refuses the dump)")
		}
		for _, m := range u.unsure {
			finding(plans.Warning, m)
		}
		for _, m := range u.refused {
			finding(plans.Blocking, m)
		}
	}
	return findings, nil
}

// preflightOne finds a database of the source on the target, dumps its schemas on the source
// without rows and says what of their needs the target's server does not meet.
func (c Dumps) preflightOne(ctx context.Context, dyn dynamic.Interface, source Dumps, item plans.DataItem) (unmet, error) {
	cfg := source.config(item.Name)
	to, err := c.locateConfigured(ctx, dyn, cfg, snapshot.Database{Name: item.Name, Engine: cfg.Engine, ValuesAsText: snapshot.ValuesAsTextFixed}, 0)
	if err != nil {
		return unmet{}, err
	}
	from, schemas, err := source.onSource(ctx, item, cfg)
	if err != nil {
		return unmet{}, fmt.Errorf("on the source: %w", err)
	}
	if len(schemas) == 0 {
		return unmet{}, nil
	}
	scan := newSQLScanner(cfg.Engine)
	scan.needs = &dumpNeeds{}
	if err := from.eng.dump(ctx, source, from, schemas, true, scan); err != nil {
		return unmet{}, fmt.Errorf("dump its schemas on the source: %w", err)
	}
	u, err := to.eng.checkNeeds(ctx, c, to, snapshot.Database{Name: item.Name, Engine: cfg.Engine, Schemas: schemas}, *scan.needs)
	if err != nil {
		return unmet{}, fmt.Errorf("on the target: %w", err)
	}
	return u, nil
}

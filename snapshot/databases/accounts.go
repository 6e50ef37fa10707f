package databases

import (
	"context"
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
// (engine.checkNeeds) before anything of it runs, as a migration's preflight does with a dump of
// the source's schemas (PreflightTarget): a PostgreSQL load stopped at such a statement has dropped the
// target's database by then, and a MySQL trigger or view whose definer the server lacks loads
// with a mere warning and fails only when the application uses it.
type dumpNeeds struct {
	// PostgreSQL roles: given objects (OWNER TO, ALTER DEFAULT PRIVILEGES FOR ROLE), granted or
	// revoked privileges, or run as (SET SESSION AUTHORIZATION).
	owners, grantees, sessions map[string]bool
	extensions                 map[string]bool
	// definers are the MySQL accounts views, triggers, routines and events run as.
	definers map[mysqlAccount]bool
}

// mysqlAccount is a MySQL or MariaDB account, 'user'@'host'.
type mysqlAccount struct{ user, host string }

func (a mysqlAccount) String() string { return quote(a.user) + "@" + quote(a.host) }

// needLimit is how much of a statement's beginning names the accounts it needs: a statement that
// names them later is not checked, its load failing as before.
const needLimit = 4096

var (
	pgIdent     = `(?:"(?:[^"]|"")+"|[A-Za-z_\x80-\xff][A-Za-z0-9_$\x80-\xff]*)`
	pgIdentList = pgIdent + `(?:\s*,\s*` + pgIdent + `)*`
	pgIdentRE   = regexp.MustCompile(pgIdent)
	pgOwnerRE   = regexp.MustCompile(`(?is)^ALTER\s.*\sOWNER\s+TO\s+(` + pgIdent + `)$`)
	pgGrantRE   = regexp.MustCompile(`(?is)^(?:GRANT|ALTER\s+DEFAULT\s+PRIVILEGES\s.*\sGRANT)\s.*\sTO\s+(` + pgIdentList + `)(?:\s+WITH\s+(?:GRANT|ADMIN)\s+OPTION)?(?:\s+GRANTED\s+BY\s+` + pgIdent + `)?$`)
	pgRevokeRE  = regexp.MustCompile(`(?is)^(?:REVOKE|ALTER\s+DEFAULT\s+PRIVILEGES\s.*\sREVOKE)\s.*\sFROM\s+(` + pgIdentList + `)(?:\s+(?:CASCADE|RESTRICT))?$`)
	pgForRoleRE = regexp.MustCompile(`(?is)^ALTER\s+DEFAULT\s+PRIVILEGES\s+FOR\s+(?:ROLE|USER)\s+(` + pgIdentList + `)\s`)
	pgPolicyRE  = regexp.MustCompile(`(?is)^CREATE\s+POLICY\s.*?\sTO\s+(` + pgIdentList + `)(?:\s|$)`)
	pgSessionRE = regexp.MustCompile(`(?is)^SET\s+SESSION\s+AUTHORIZATION\s+('(?:[^']|'')*'|` + pgIdent + `)$`)
	pgExtRE     = regexp.MustCompile(`(?is)^CREATE\s+EXTENSION\s+(?:IF\s+NOT\s+EXISTS\s+)?(` + pgIdent + `)`)
	// mysqlDefinerRE is the DEFINER of mysqldump's CREATE VIEW, TRIGGER, PROCEDURE, FUNCTION and
	// EVENT, inside its versioned comments or not.
	mysqlDefinerRE = regexp.MustCompile("(?is)^(?:/\\*!\\d+\\s*)?CREATE(?:\\s+OR\\s+REPLACE)?(?:\\s+ALGORITHM\\s*=\\s*\\w+)?\\s*(?:\\*/\\s*)?(?:/\\*!\\d+\\s*)?DEFINER\\s*=\\s*" +
		"(`(?:[^`]|``)*`|'(?:[^'\\\\]|''|\\\\.)*'|[A-Za-z0-9_$]+)@(`(?:[^`]|``)*`|'(?:[^'\\\\]|''|\\\\.)*'|[A-Za-z0-9_$.%-]+)")
)

// pgRoleWords are the words a grantee or owner may be that are no role.
var pgRoleWords = map[string]bool{"public": true, "current_user": true, "session_user": true, "current_role": true, "group": true}

// note records what a statement of the dump needs; text is its beginning.
func (n *dumpNeeds) note(pg bool, text []byte) {
	if !pg {
		text = text[len(noiseRE.Find(text)):] // the comments that end no statement of their own
		if m := mysqlDefinerRE.FindSubmatch(text); m != nil {
			a := mysqlAccount{user: mysqlUnquote(string(m[1])), host: mysqlUnquote(string(m[2]))}
			if !strings.EqualFold(a.user, "current_user") {
				n.definers = addTo(n.definers, a)
			}
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
	switch {
	case pgOwnerRE.Match(text):
		roles(&n.owners, pgOwnerRE.FindSubmatch(text)[1])
	case pgForRoleRE.Match(text):
		roles(&n.owners, pgForRoleRE.FindSubmatch(text)[1])
		if m := pgGrantRE.FindSubmatch(text); m != nil {
			roles(&n.grantees, m[1])
		} else if m := pgRevokeRE.FindSubmatch(text); m != nil {
			roles(&n.grantees, m[1])
		}
	case pgGrantRE.Match(text):
		roles(&n.grantees, pgGrantRE.FindSubmatch(text)[1])
	case pgRevokeRE.Match(text):
		roles(&n.grantees, pgRevokeRE.FindSubmatch(text)[1])
	case pgPolicyRE.Match(text):
		roles(&n.grantees, pgPolicyRE.FindSubmatch(text)[1])
	case pgSessionRE.Match(text):
		s := string(pgSessionRE.FindSubmatch(text)[1])
		if strings.HasPrefix(s, "'") {
			n.sessions = addTo(n.sessions, strings.ReplaceAll(s[1:len(s)-1], "''", "'"))
		} else {
			roles(&n.sessions, []byte(s))
		}
	case pgExtRE.Match(text):
		name, _ := pgUnquote(string(pgExtRE.FindSubmatch(text)[1]))
		n.extensions = addTo(n.extensions, name)
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

// mysqlString quotes s as a MySQL string, whatever the server's escaping.
func mysqlString(s string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "'", "''") + "'"
}

// checkNeeds of PostgreSQL: roles the dump names that the server lacks, extensions the server
// cannot create, and, for a user that is not a superuser, a database it may not recreate
// (CREATEDB, owning it where it exists) or objects it may not give to their owners (a member of
// each).
func (postgres) checkNeeds(ctx context.Context, c Dumps, t target, d snapshot.Database, n dumpNeeds) ([]string, error) {
	named := map[string]bool{}
	for _, set := range []map[string]bool{n.owners, n.grantees, n.sessions} {
		maps.Copy(named, set)
	}
	var script strings.Builder
	script.WriteString("SELECT 'self', rolsuper, rolcreatedb FROM pg_roles WHERE rolname = current_user;\n")
	list := func(names []string) string {
		quoted := make([]string, len(names))
		for i, name := range names {
			quoted[i] = quote(name)
		}
		return strings.Join(quoted, ", ")
	}
	if len(named) > 0 {
		fmt.Fprintf(&script, "SELECT 'role', rolname, pg_has_role(current_user, oid, 'MEMBER') FROM pg_roles WHERE rolname IN (%s);\n", list(slices.Sorted(maps.Keys(named))))
	}
	fmt.Fprintf(&script, "SELECT 'db', datname, pg_has_role(current_user, datdba, 'MEMBER') FROM pg_database WHERE datname IN (%s);\n", list(d.Schemas))
	if len(n.extensions) > 0 {
		fmt.Fprintf(&script, "SELECT 'ext', name, 't' FROM pg_available_extensions WHERE name IN (%s);\n", list(slices.Sorted(maps.Keys(n.extensions))))
	}
	rows, err := c.pgQuery(ctx, t.item, t.cfg.Container, t.cred, "postgres", script.String())
	if err != nil {
		return nil, fmt.Errorf("read the roles and databases of the server: %w", err)
	}
	var super, createdb bool
	member, owns, available := map[string]bool{}, map[string]bool{}, map[string]bool{}
	found := map[string]bool{}
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
			available[r[1]] = true
		}
	}
	var problems []string
	var missing []string
	for _, role := range slices.Sorted(maps.Keys(named)) {
		if !found[role] {
			missing = append(missing, role+" ("+pgRoleUse(n, role)+")")
		}
	}
	if len(missing) > 0 {
		problems = append(problems, "roles the dump names are not on the target's server: "+strings.Join(missing, ", ")+
			"; create them there first (roles that may not log in will do for ownership and grants)")
	}
	var noExt []string
	for _, ext := range slices.Sorted(maps.Keys(n.extensions)) {
		if !available[ext] {
			noExt = append(noExt, ext)
		}
	}
	if len(noExt) > 0 {
		problems = append(problems, "extensions the dump creates are not available on the target's server: "+strings.Join(noExt, ", "))
	}
	if !super {
		user := t.cred.user
		if !createdb {
			problems = append(problems, fmt.Sprintf("role %s may not create databases (it is no superuser and lacks CREATEDB), and the dump drops and recreates %s; restore with a superuser's credentials or grant it CREATEDB",
				user, strings.Join(d.Schemas, ", ")))
		}
		for _, db := range d.Schemas {
			if isOwner, exists := owns[db]; exists && !isOwner {
				problems = append(problems, fmt.Sprintf("role %s does not own database %s on the target, which the dump drops", user, db))
			}
		}
		var notMember []string
		for _, role := range slices.Sorted(maps.Keys(n.owners)) {
			if found[role] && !member[role] {
				notMember = append(notMember, role)
			}
		}
		if len(notMember) > 0 {
			problems = append(problems, fmt.Sprintf("role %s may not give objects to %s, not being a member", user, strings.Join(notMember, ", ")))
		}
		for _, role := range slices.Sorted(maps.Keys(n.sessions)) {
			if role != user {
				problems = append(problems, fmt.Sprintf("the dump runs part of itself as role %s (SET SESSION AUTHORIZATION), which only a superuser may", role))
			}
		}
	}
	return problems, nil
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

// checkNeeds of MySQL: accounts the dump's views, triggers, routines or events run as that the
// server lacks (it creates them with a warning, and they fail when used). A user that may not
// read the server's accounts cannot tell; the load then goes on, and fails at such a statement
// unless the user may create objects for other accounts.
func (mysql) checkNeeds(ctx context.Context, c Dumps, t target, d snapshot.Database, n dumpNeeds) ([]string, error) {
	if len(n.definers) == 0 {
		return nil, nil
	}
	accounts := slices.SortedFunc(maps.Keys(n.definers), func(a, b mysqlAccount) int { return strings.Compare(a.String(), b.String()) })
	pairs := make([]string, len(accounts))
	for i, a := range accounts {
		pairs[i] = "(" + mysqlString(a.user) + ", " + mysqlString(a.host) + ")"
	}
	rows, err := c.query(ctx, t.item, t.cfg.Container, t.cred, "SELECT user, host FROM mysql.user WHERE (user, host) IN ("+strings.Join(pairs, ", ")+");")
	if err != nil {
		if c.Log != nil {
			c.Log.Warn("the server's accounts cannot be read: the definers of the dump's views, triggers, routines and events are not checked", "database", d.Name, "user", t.cred.user, "error", err)
		}
		return nil, nil
	}
	found := map[mysqlAccount]bool{}
	for _, r := range rows {
		if len(r) == 2 {
			found[mysqlAccount{user: r[0], host: r[1]}] = true
		}
	}
	var missing []string
	for _, a := range accounts {
		if !found[a] {
			missing = append(missing, a.String())
		}
	}
	if len(missing) > 0 {
		return []string{"the dump's views, triggers, routines or events run as accounts the target's server lacks: " + strings.Join(missing, ", ") +
			"; create them there first (ACCOUNT LOCK will do) or they fail when used"}, nil
	}
	return nil, nil
}

// PreflightTarget checks, before a migration stops anything, that the target's servers can take
// the dumps of the plan's databases: it dumps each one's schemas from the source without rows
// (source holds the source's clients) and checks their needs on the target (c, with the
// migration's mapping), as a restore checks its dump's. What it cannot check (a database that
// does not run on the target yet, as ferry makes it there; a server that does not answer) is a
// warning: the restore checks it.
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
		subject := "database " + item.Name
		problems, err := c.preflightOne(ctx, dyn, source, item)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil {
			findings = append(findings, plans.Finding{Severity: plans.Warning, Subject: subject,
				Message: "the accounts its dump needs are checked when it is restored, not now: " + err.Error()})
		}
		for _, p := range problems {
			findings = append(findings, plans.Finding{Severity: plans.Blocking, Subject: subject, Message: p})
		}
	}
	return findings, nil
}

// preflightOne dumps the schemas of a database of the source without rows and says what of
// their needs the target's server does not meet.
func (c Dumps) preflightOne(ctx context.Context, dyn dynamic.Interface, source Dumps, item plans.DataItem) ([]string, error) {
	cfg := source.config(item.Name)
	eng, err := engineFor(cfg.Engine)
	if err != nil {
		return nil, err
	}
	from := target{item: item, cfg: cfg, eng: eng}
	if from.cred, err = source.credentials(ctx, item.Namespace, cfg, eng.defaultUser()); err != nil {
		return nil, fmt.Errorf("on the source: %w", err)
	}
	d := snapshot.Database{Name: item.Name, Engine: cfg.Engine, Schemas: cfg.Schemas}
	if len(d.Schemas) == 0 {
		if d.Schemas, err = eng.listSchemas(ctx, source, from); err != nil {
			return nil, fmt.Errorf("on the source: %w", err)
		}
	}
	if len(d.Schemas) == 0 {
		return nil, nil
	}
	scan := newSQLScanner(cfg.Engine)
	scan.needs = &dumpNeeds{}
	if err := eng.dump(ctx, source, from, d.Schemas, true, scan); err != nil {
		return nil, fmt.Errorf("dump its schemas on the source: %w", err)
	}
	to, err := c.locateConfigured(ctx, dyn, cfg, d, 0)
	if err != nil {
		return nil, err
	}
	problems, err := eng.checkNeeds(ctx, c, to, d, *scan.needs)
	if err != nil {
		return nil, fmt.Errorf("on the target: %w", err)
	}
	return problems, nil
}

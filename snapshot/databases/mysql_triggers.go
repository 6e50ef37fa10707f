package databases

import (
	"context"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// MySQL has no switch that keeps a table's triggers from firing (PostgreSQL's carry-back
// disables them, postgres_carryback.go), and a carry-back's DELETE and INSERT of every row would
// fire blue's: a column rewritten again, audit rows and counts written twice, over what green's
// triggers wrote when its rows were written (which comes with green's tables). So a carry-back
// takes blue's triggers on the tables it replaces off for its transaction:
//   - it first makes each of them on an empty table of its table's shape, as its definer:
//     ferry's user may then make them again, and the server takes their definitions (else the
//     database is refused, nothing changed);
//   - it keeps their definitions in a table of a schema of its own (keptTriggers), drops them,
//     and replaces the rows;
//   - it makes those that are gone again as they were, in their order of action, and forgets the
//     kept definitions. A carry-back broken off in between (ferry killed) finds them when it runs
//     again, and makes the triggers first.

// mysqlTrigger is a trigger as information_schema.TRIGGERS describes it.
type mysqlTrigger struct {
	schema, name, table, timing, event, statement, sqlMode, definer, charset, collation string
}

// keptTriggers is the table that keeps the definitions of the triggers a carry-back took off
// until it has made them again: in a schema of its own, which no load drops, whatever schemas a
// later backup holds. It has a primary key, as servers that require one on every table want.
const (
	keptTriggersSchema = "ferry_stage_triggers"
	keptTriggers       = "`" + keptTriggersSchema + "`.`kept`"
)

// triggerColumns are the columns of information_schema.TRIGGERS a trigger is made again from.
const triggerColumns = "TRIGGER_SCHEMA, TRIGGER_NAME, EVENT_OBJECT_TABLE, ACTION_TIMING, EVENT_MANIPULATION, ACTION_STATEMENT, SQL_MODE, DEFINER, CHARACTER_SET_CLIENT, COLLATION_CONNECTION, ACTION_ORDER"

const createKeptTriggers = "CREATE DATABASE IF NOT EXISTS `" + keptTriggersSchema + "`;\n" +
	"CREATE TABLE IF NOT EXISTS " + keptTriggers + " (TRIGGER_SCHEMA VARCHAR(64) NOT NULL, TRIGGER_NAME VARCHAR(64) NOT NULL, EVENT_OBJECT_TABLE VARCHAR(64) NOT NULL," +
	" ACTION_TIMING VARCHAR(16) NOT NULL, EVENT_MANIPULATION VARCHAR(16) NOT NULL, ACTION_STATEMENT LONGTEXT NOT NULL, SQL_MODE TEXT NOT NULL, DEFINER VARCHAR(384) NOT NULL," +
	" CHARACTER_SET_CLIENT VARCHAR(64) NOT NULL, COLLATION_CONNECTION VARCHAR(64) NOT NULL, ACTION_ORDER BIGINT NOT NULL," +
	" PRIMARY KEY (TRIGGER_SCHEMA, TRIGGER_NAME)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;"

// triggersOn is the condition that selects the triggers on the tables copies replace.
func triggersOn(copies []tableCopy) string {
	var on []string
	for _, c := range copies {
		on = append(on, "(EVENT_OBJECT_SCHEMA = "+quote(c.schema)+" AND EVENT_OBJECT_TABLE = "+quote(c.name)+")")
	}
	return strings.Join(on, " OR ")
}

// inSchemas is the condition that selects the triggers of schemas.
func inSchemas(schemas []string) string {
	quoted := make([]string, len(schemas))
	for i, s := range schemas {
		quoted[i] = quote(s)
	}
	return "TRIGGER_SCHEMA IN (" + strings.Join(quoted, ", ") + ")"
}

// readTriggers reads the triggers from table (information_schema.TRIGGERS or keptTriggers) that
// where selects, in their order of action. Every field is read hex-encoded: a body's tabs and
// newlines would otherwise come escaped in the client's batch output.
func readTriggers(ctx context.Context, c Dumps, t target, table, where string) ([]mysqlTrigger, error) {
	fields := strings.Split(triggerColumns, ", ")
	fields = fields[:len(fields)-1] // ACTION_ORDER orders them
	selected := make([]string, len(fields))
	for i, f := range fields {
		selected[i] = "HEX(" + f + ")"
	}
	rows, err := c.query(ctx, t.item, t.cfg.Container, t.cred, "SELECT "+strings.Join(selected, ", ")+" FROM "+table+" WHERE "+where+
		" ORDER BY TRIGGER_SCHEMA, EVENT_OBJECT_TABLE, ACTION_TIMING, EVENT_MANIPULATION, ACTION_ORDER;")
	if err != nil {
		return nil, err
	}
	var out []mysqlTrigger
	for _, r := range rows {
		if len(r) != len(fields) {
			return nil, fmt.Errorf("a trigger's row of %d fields, want %d", len(r), len(fields))
		}
		v := make([]string, len(r))
		for i, h := range r {
			b, err := hex.DecodeString(h)
			if err != nil {
				return nil, fmt.Errorf("a trigger's field %s: %w", fields[i], err)
			}
			v[i] = string(b)
		}
		out = append(out, mysqlTrigger{schema: v[0], name: v[1], table: v[2], timing: v[3], event: v[4], statement: v[5], sqlMode: v[6], definer: v[7], charset: v[8], collation: v[9]})
	}
	return out, nil
}

// keepAndDropTriggersSQL keeps the definitions of the triggers on the tables copies replace, then
// drops those triggers; one statement a line. A drop waits for the table's metadata lock behind
// any open transaction that read it: a minute, not the server's default of a day or more.
func keepAndDropTriggersSQL(triggers []mysqlTrigger, copies []tableCopy) []string {
	lines := strings.Split(createKeptTriggers, "\n")
	lines = append(lines, "REPLACE INTO "+keptTriggers+" ("+triggerColumns+") SELECT "+triggerColumns+" FROM information_schema.TRIGGERS WHERE "+triggersOn(copies)+";",
		"SET SESSION lock_wait_timeout = 60;")
	for _, tr := range triggers {
		lines = append(lines, "DROP TRIGGER "+mysqlIdent(tr.schema)+"."+mysqlIdent(tr.name)+";")
	}
	return lines
}

// makeTriggersSQL makes the triggers as they were, in the order given (their order of action
// on each table and event): each under its own SQL mode, client character set and definer,
// replacing one of the same name that is there. The client must pass comments on (--comments).
func makeTriggersSQL(triggers []mysqlTrigger) string {
	var b strings.Builder
	for _, tr := range triggers {
		// The body goes as UTF-8; a trigger made under another client character set keeps it
		// where its body is ASCII, the same bytes in either.
		charset, collation := tr.charset, tr.collation
		if !strings.HasPrefix(charset, "utf8") && !isASCII(tr.statement) {
			charset, collation = "utf8mb4", "utf8mb4_general_ci"
		}
		b.WriteString("SET SESSION sql_mode = " + quote(tr.sqlMode) + ";\n")
		b.WriteString("SET SESSION character_set_client = " + quote(charset) + ";\n")
		b.WriteString("SET SESSION collation_connection = " + quote(collation) + ";\n")
		b.WriteString("DROP TRIGGER IF EXISTS " + mysqlIdent(tr.schema) + "." + mysqlIdent(tr.name) + ";\n")
		delimiter := "$$ferry$$"
		for i := 0; strings.Contains(tr.statement, delimiter); i++ {
			delimiter = "$$ferry" + strconv.Itoa(i) + "$$"
		}
		b.WriteString("DELIMITER " + delimiter + "\n")
		b.WriteString("CREATE " + definerClause(tr.definer) + "TRIGGER " + mysqlIdent(tr.schema) + "." + mysqlIdent(tr.name) + " " + tr.timing + " " + tr.event +
			" ON " + mysqlIdent(tr.schema) + "." + mysqlIdent(tr.table) + " FOR EACH ROW " + tr.statement + delimiter + "\n")
		b.WriteString("DELIMITER ;\n")
	}
	return b.String()
}

// definerClause is DEFINER = the account (user@host, each quoted) or role a trigger runs as.
func definerClause(definer string) string {
	if definer == "" {
		return ""
	}
	if at := strings.LastIndex(definer, "@"); at >= 0 {
		return "DEFINER=" + mysqlIdent(definer[:at]) + "@" + mysqlIdent(definer[at+1:]) + " "
	}
	return "DEFINER=" + mysqlIdent(definer) + " "
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// tryTriggers makes each trigger, as its definer, on an empty table of its table's shape in a
// schema of its own, dropped after: ferry's user may make it so, and the server takes its
// definition (the columns it names are its table's), before the carry-back drops the original.
func tryTriggers(ctx context.Context, c Dumps, t target, triggers []mysqlTrigger) error {
	const trialSchema = "ferry_stage_trial"
	var sql strings.Builder
	sql.WriteString("DROP DATABASE IF EXISTS `" + trialSchema + "`;\nCREATE DATABASE `" + trialSchema + "`;\n")
	trial := make([]mysqlTrigger, len(triggers))
	for i, tr := range triggers {
		name := "trial_" + strconv.Itoa(i)
		sql.WriteString("CREATE TABLE `" + trialSchema + "`." + mysqlIdent(name) + " LIKE " + mysqlIdent(tr.schema) + "." + mysqlIdent(tr.table) + ";\n")
		tr.schema, tr.name, tr.table = trialSchema, name, name
		trial[i] = tr
	}
	sql.WriteString(makeTriggersSQL(trial))
	_, err := c.query(ctx, t.item, t.cfg.Container, t.cred, sql.String(), "--comments")
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if _, derr := c.query(ctx, t.item, t.cfg.Container, t.cred, "DROP DATABASE IF EXISTS `"+trialSchema+"`;"); derr != nil && err == nil {
		return fmt.Errorf("drop schema %s: %w", trialSchema, derr)
	}
	return err
}

// remakeTriggers makes again those of triggers that are gone, then forgets their kept
// definitions (and the schema that kept them, once it keeps none).
func remakeTriggers(ctx context.Context, c Dumps, t target, triggers []mysqlTrigger) error {
	if len(triggers) == 0 {
		return nil
	}
	var names, missing []string
	for _, tr := range triggers {
		names = append(names, "("+quote(tr.schema)+", "+quote(tr.name)+")")
	}
	there, err := c.query(ctx, t.item, t.cfg.Container, t.cred, "SELECT HEX(TRIGGER_SCHEMA), HEX(TRIGGER_NAME) FROM information_schema.TRIGGERS WHERE (TRIGGER_SCHEMA, TRIGGER_NAME) IN ("+strings.Join(names, ", ")+");")
	if err != nil {
		return fmt.Errorf("look for the triggers taken off: %w", err)
	}
	made := map[string]bool{}
	for _, r := range there {
		if len(r) == 2 {
			made[r[0]+"."+r[1]] = true // HEX() writes upper case
		}
	}
	hexOf := func(s string) string { return strings.ToUpper(hex.EncodeToString([]byte(s))) }
	var gone []mysqlTrigger
	for _, tr := range triggers {
		if !made[hexOf(tr.schema)+"."+hexOf(tr.name)] {
			gone = append(gone, tr)
			missing = append(missing, tr.schema+"."+tr.name)
		}
	}
	if len(gone) > 0 {
		// A drop or create waits for the table's metadata lock: a minute, as the swap's drops.
		if _, err := c.query(ctx, t.item, t.cfg.Container, t.cred, "SET SESSION lock_wait_timeout = 60;\n"+makeTriggersSQL(gone), "--comments"); err != nil {
			return fmt.Errorf("make triggers %s again: %w; their definitions stay in %s, and a carry-back run again makes them", strings.Join(missing, ", "), err, keptTriggers)
		}
	}
	if kept, err := keptTriggersExist(ctx, c, t); err != nil || !kept {
		return err // the swap broke off before it kept them, and so before it dropped any
	}
	forget := "DELETE FROM " + keptTriggers + " WHERE (TRIGGER_SCHEMA, TRIGGER_NAME) IN (" + strings.Join(names, ", ") + ");\n" +
		"SELECT COUNT(*) FROM " + keptTriggers + ";"
	rows, err := c.query(ctx, t.item, t.cfg.Container, t.cred, forget)
	if err != nil {
		return fmt.Errorf("forget the definitions of the triggers made again: %w", err)
	}
	if len(rows) == 1 && len(rows[0]) == 1 && rows[0][0] == "0" {
		if _, err := c.query(ctx, t.item, t.cfg.Container, t.cred, "DROP DATABASE IF EXISTS `"+keptTriggersSchema+"`;"); err != nil {
			return fmt.Errorf("drop schema %s: %w", keptTriggersSchema, err)
		}
	}
	return nil
}

// remakeKeptTriggers makes again the triggers of schemas that a carry-back broken off took off
// and kept, if it kept any.
func remakeKeptTriggers(ctx context.Context, c Dumps, t target, schemas []string) (int, error) {
	if kept, err := keptTriggersExist(ctx, c, t); err != nil || !kept {
		return 0, err
	}
	kept, err := readTriggers(ctx, c, t, keptTriggers, inSchemas(schemas))
	if err != nil {
		return 0, fmt.Errorf("read the triggers a carry-back broken off kept in %s: %w", keptTriggers, err)
	}
	return len(kept), remakeTriggers(ctx, c, t, kept)
}

// keptTriggersExist says whether the server has the table keptTriggers.
func keptTriggersExist(ctx context.Context, c Dumps, t target) (bool, error) {
	rows, err := c.query(ctx, t.item, t.cfg.Container, t.cred, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = "+quote(keptTriggersSchema)+
		" AND TABLE_NAME = 'kept';")
	if err != nil {
		return false, fmt.Errorf("look for the definitions of triggers a carry-back took off: %w", err)
	}
	return len(rows) == 1 && len(rows[0]) == 1 && rows[0][0] != "0", nil
}

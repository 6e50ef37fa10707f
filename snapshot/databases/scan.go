package databases

import (
	"bytes"
	"regexp"
	"strings"
)

// sqlScanner follows a dump's SQL as the database's client reads it (quotes, comments, the mysql
// client's DELIMITER, psql's meta-commands and COPY data), without keeping it: it tells where each
// statement starts and ends, which table it belongs to and how big it is, and whether the dump
// ends between statements. Restore uses it to check a dump's format to its end before anything
// is applied, to size the largest statement against the server's limit, and to name a failing
// statement without its data.
type sqlScanner struct {
	pg bool

	line  int64 // of the byte being read, from 1
	state scanState
	delim []byte // MySQL's statement delimiter (DELIMITER changes it)
	dm    int    // bytes of delim matched so far
	esc   bool   // the previous byte was a backslash inside a quote that escapes with it
	eq    bool   // the quote being read escapes with a backslash (MySQL, PostgreSQL's E'')
	prev  byte   // the previous byte in stNormal (E before a quote, * before a slash)
	word  []byte // letters at a statement's start (MySQL's DELIMITER command)
	meta  []byte // a client command's line (DELIMITER, psql's backslash commands)
	tag   []byte // a PostgreSQL dollar quote's tag, "$...$"
	tm    int    // bytes of the closing tag matched so far
	copyN int    // bytes of the current COPY data line (-1: not a line start)
	copyH [3]byte
	// copyTable is the table of the COPY whose data is being read.
	copyTable string

	schema string // the current schema (USE) or database (\connect)
	cur    statement
	open   bool // cur has begun (a byte other than blanks and comments outside one)

	// Largest is the biggest statement or COPY data row so far.
	Largest statement
	// Statements counts the statements ended.
	Statements int64
	// recent are the last statements ended, to name a failing one by the line a client reports.
	recent [recentStatements]statement
	next   int
	// copyStmt is the last COPY statement: its rows may have pushed it out of recent.
	copyStmt statement

	// needs, when set, collects what the statements need of the target's server (see note),
	// from the beginning of each, text.
	needs *dumpNeeds
	text  []byte
}

type scanState int

const (
	stNormal scanState = iota
	stSingle
	stDouble
	stBack
	stDash    // one '-' seen where a comment may start
	stComment // to the end of the line
	stSlash   // one '/' seen
	stBlock   // /* ... */
	stBlockStar
	stDollarTag // $tag being read
	stDollar    // inside $tag$ ... $tag$
	stMeta      // a client command, to the end of the line
	stCopy      // COPY ... FROM stdin data, up to a line "\."
)

// recentStatements is how many ended statements a scanner remembers: enough to cover what the
// client may not yet have executed when it fails (the streams in between buffer little).
const recentStatements = 512

// headLimit bounds the statement text a scanner keeps: what an error may show of a statement.
const headLimit = 200

// statement is where a statement of a dump is, and its beginning.
type statement struct {
	First, Last int64 // lines
	Bytes       int64
	Table       string // "schema.table" for statements on one table, or ""
	Row         bool   // a COPY data row rather than a statement
	head        []byte
}

func newSQLScanner(engine string) *sqlScanner {
	return &sqlScanner{pg: engine == "postgresql", line: 1, delim: []byte(";"), copyN: -1}
}

func (s *sqlScanner) Write(p []byte) (int, error) {
	for _, b := range p {
		s.byte(b)
	}
	return len(p), nil
}

func (s *sqlScanner) byte(b byte) {
	switch s.state {
	case stNormal:
		s.normal(b)
	case stSingle, stDouble, stBack:
		s.add(b)
		closing := map[scanState]byte{stSingle: '\'', stDouble: '"', stBack: '`'}[s.state]
		switch {
		case s.esc:
			s.esc = false
		case b == '\\' && s.eq && s.state != stBack:
			s.esc = true
		case b == closing:
			s.state = stNormal
			s.prev = 0
		}
	case stDash:
		if b == '-' {
			s.state = stComment
			s.add(b)
			return
		}
		s.state = stNormal
		s.prev = '-'
		s.normal(b)
	case stComment:
		s.add(b)
		if b == '\n' {
			s.state = stNormal
			s.prev = 0
		}
	case stSlash:
		if b == '*' {
			s.state = stBlock
			s.add(b)
			return
		}
		s.state = stNormal
		s.prev = '/'
		s.normal(b)
	case stBlock, stBlockStar:
		s.add(b)
		switch {
		case s.state == stBlockStar && b == '/':
			s.state = stNormal
			s.prev = 0
		case b == '*':
			s.state = stBlockStar
		default:
			s.state = stBlock
		}
	case stDollarTag:
		switch {
		case b == '$':
			s.tag = append(s.tag, b)
			s.state, s.tm = stDollar, 0
			s.add(b)
		case b == '_' || isLetter(b) || (len(s.tag) > 1 && b >= '0' && b <= '9'):
			s.tag = append(s.tag, b)
			s.add(b)
		default: // not a dollar quote ($1, a name with a dollar)
			s.state = stNormal
			s.normal(b)
		}
	case stDollar:
		s.add(b)
		switch {
		case b == s.tag[s.tm]:
			s.tm++
			if s.tm == len(s.tag) {
				s.state, s.prev = stNormal, 0
			}
		case b == s.tag[0]:
			s.tm = 1
		default:
			s.tm = 0
		}
	case stMeta:
		if b != '\n' {
			if len(s.meta) < 4096 {
				s.meta = append(s.meta, b)
			}
			return
		}
		s.command(string(s.meta))
		s.meta = s.meta[:0]
		s.state = stNormal
	case stCopy:
		s.copyByte(b)
	}
	if b == '\n' {
		s.line++
	}
}

// normal reads a byte outside quotes and comments.
func (s *sqlScanner) normal(b byte) {
	if !s.open {
		switch {
		case b == ' ' || b == '\t' || b == '\r' || b == '\n':
			if len(s.word) > 0 { // letters, then a blank: a statement's first word
				s.endWord(b)
			}
			return
		case s.pg && b == '\\' && len(s.word) == 0:
			s.state = stMeta
			return
		case !s.pg && isLetter(b) && len(s.word) < 16:
			s.word = append(s.word, b)
			return
		case b == '-' && len(s.word) == 0:
			s.state = stDash
			return
		case b == '/' && len(s.word) == 0:
			s.begin()
			s.add(b)
			s.state = stSlash
			return
		}
		if len(s.word) > 0 {
			s.endWord(b)
			return
		}
		s.begin()
	}
	s.add(b)
	switch {
	case len(s.delim) > 0 && !s.pg && b == s.delim[s.dm]:
		s.dm++
		if s.dm == len(s.delim) {
			s.dm = 0
			s.end(int64(len(s.delim)))
		}
		return
	case s.pg && b == ';':
		s.end(1)
		return
	}
	s.dm = 0
	if !s.pg && len(s.delim) > 0 && b == s.delim[0] {
		s.dm = 1
	}
	switch b {
	case '\'':
		s.state, s.eq = stSingle, !s.pg || s.prev == 'E' || s.prev == 'e'
	case '"':
		s.state, s.eq = stDouble, !s.pg
	case '`':
		if !s.pg {
			s.state, s.eq = stBack, false
		}
	case '-':
		if s.prev == '-' {
			s.state = stComment
		}
	case '*':
		if s.prev == '/' {
			s.state = stBlock
		}
	case '$':
		if s.pg && !isLetter(s.prev) && !(s.prev >= '0' && s.prev <= '9') && s.prev != '_' {
			s.state, s.tag = stDollarTag, append(s.tag[:0], '$')
		}
	}
	s.prev = b
}

// endWord ends the letters a MySQL statement starts with: DELIMITER makes the line a command,
// anything else begins a statement with them.
func (s *sqlScanner) endWord(b byte) {
	word := s.word
	s.word = nil
	if strings.EqualFold(string(word), "delimiter") && (b == ' ' || b == '\t') {
		s.state, s.meta = stMeta, append(s.meta[:0], "delimiter "...)
		return
	}
	s.begin()
	for _, w := range word {
		s.add(w)
	}
	s.prev = word[len(word)-1]
	if b == '\n' {
		s.add(b)
		return
	}
	s.normal(b)
}

// command carries out a client command line.
func (s *sqlScanner) command(line string) {
	if !s.pg {
		if d := strings.TrimSpace(line[len("delimiter "):]); d != "" {
			s.delim, s.dm = []byte(d), 0
		}
		return
	}
	if m := connectRE.FindStringSubmatch(line); m != nil {
		s.schema = strings.ReplaceAll(m[1], "''", "'")
	} else if m := connectNameRE.FindStringSubmatch(line); m != nil {
		s.schema = strings.ReplaceAll(strings.Trim(m[1], `"`), `""`, `"`)
	}
}

func (s *sqlScanner) begin() {
	s.open = true
	s.cur = statement{First: s.line, head: s.cur.head[:0]}
	s.text = s.text[:0]
}

func (s *sqlScanner) add(b byte) {
	if !s.open {
		return // comments between statements
	}
	s.cur.Bytes++
	if len(s.cur.head) < headLimit {
		s.cur.head = append(s.cur.head, b)
	}
	if s.needs != nil && len(s.text) < needLimit {
		s.text = append(s.text, b)
	}
}

// end ends the current statement, whose last n bytes are its delimiter.
func (s *sqlScanner) end(n int64) {
	s.cur.Last = s.line
	s.cur.Bytes -= n
	if len(s.cur.head) > int(s.cur.Bytes) {
		s.cur.head = s.cur.head[:s.cur.Bytes]
	}
	s.cur.Table = s.tableOf(s.cur.head)
	if s.needs != nil {
		n := min(int64(len(s.text)), max(s.cur.Bytes, 0))
		s.needs.note(s.pg, bytes.TrimSpace(s.text[:n]), s.cur.Bytes > n)
	}
	s.record(s.cur)
	s.open = false
	s.prev = 0
	if s.pg && copyRE.Match(s.cur.head) {
		s.state, s.copyN = stCopy, -1
		s.copyTable = s.cur.Table
		s.copyStmt = s.cur
		s.copyStmt.head = append([]byte(nil), s.cur.head...)
	}
}

func (s *sqlScanner) record(st statement) {
	s.Statements++
	if st.Bytes > s.Largest.Bytes {
		s.Largest = st
		s.Largest.head = append([]byte(nil), st.head...)
	}
	r := &s.recent[s.next%recentStatements]
	head := append(r.head[:0], st.head...)
	*r = st
	r.head = head
	s.next++
}

// copyByte reads COPY data: one row a line, up to a line "\.".
func (s *sqlScanner) copyByte(b byte) {
	if s.copyN < 0 { // a line starts
		s.copyN = 0
		s.cur = statement{First: s.line, Table: s.copyTable, Row: true, head: s.cur.head[:0]}
	}
	if b != '\n' {
		if s.copyN < len(s.copyH) {
			s.copyH[s.copyN] = b
		}
		s.copyN++
		s.cur.Bytes++
		return
	}
	n := s.copyN
	s.copyN = -1
	if n == 2 && s.copyH[0] == '\\' && s.copyH[1] == '.' || n == 3 && s.copyH[0] == '\\' && s.copyH[1] == '.' && s.copyH[2] == '\r' {
		s.state = stNormal
		return
	}
	s.cur.Last = s.line
	s.record(s.cur)
}

// complete says what is wrong with where the dump ended, or "" when it ended between statements.
func (s *sqlScanner) complete() string {
	if s.state == stMeta { // a last command line without its newline
		s.command(string(s.meta))
		s.state = stNormal
	}
	if s.state == stComment && !s.open {
		s.state = stNormal
	}
	switch {
	case s.state == stCopy:
		return "it ends inside the data of a COPY, without its end line"
	case s.state != stNormal:
		return "it ends inside a quoted string, a comment or a statement"
	case s.open || len(s.word) > 0:
		return "it ends inside a statement, without its delimiter"
	}
	return ""
}

// at finds the recent statement a client's line number falls in.
func (s *sqlScanner) at(line int64) (statement, bool) {
	for i := 1; i <= recentStatements && i <= s.next; i++ {
		st := s.recent[(s.next-i)%recentStatements]
		if st.First <= line && line <= st.Last {
			return st, true
		}
	}
	if s.open && s.cur.First <= line {
		return s.cur, true
	}
	if s.copyStmt.First <= line && line <= s.copyStmt.Last {
		return s.copyStmt, true
	}
	return statement{}, false
}

var (
	connectRE     = regexp.MustCompile(`^connect\s+(?:-reuse-previous=\S+\s+)?"?dbname='((?:[^']|'')*)'`)
	connectNameRE = regexp.MustCompile(`^(?:c|connect)\s+("(?:[^"]|"")+"|[^\s-]\S*)`)
	copyRE        = regexp.MustCompile(`(?is)^COPY\s.*\sFROM\s+stdin\b`)
	useRE         = regexp.MustCompile("(?i)^USE\\s+`((?:[^`]|``)+)`")
	// tableRE finds the table a statement is about: MySQL's backquoted names, PostgreSQL's
	// schema-qualified ones.
	tableRE = regexp.MustCompile("(?i)^(?:INSERT\\s+(?:IGNORE\\s+)?INTO|REPLACE\\s+INTO|CREATE\\s+TABLE|DROP\\s+TABLE\\s+IF\\s+EXISTS|DROP\\s+TABLE|ALTER\\s+TABLE(?:\\s+ONLY)?|LOCK\\s+TABLES|COPY)\\s+((?:`(?:[^`]|``)+`|\"(?:[^\"]|\"\")+\"|[A-Za-z0-9_$]+)(?:\\.(?:`(?:[^`]|``)+`|\"(?:[^\"]|\"\")+\"|[A-Za-z0-9_$]+))?)")
)

// tableOf names the table a statement is about, with its schema (MySQL) or database (PostgreSQL);
// a USE statement changes the schema.
func (s *sqlScanner) tableOf(head []byte) string {
	if m := useRE.FindSubmatch(head); m != nil && !s.pg {
		s.schema = strings.ReplaceAll(string(m[1]), "``", "`")
		return ""
	}
	m := tableRE.FindSubmatch(head)
	if m == nil {
		return ""
	}
	name := string(m[1])
	if !s.pg {
		name = strings.ReplaceAll(strings.ReplaceAll(name, "``", "\x00"), "`", "")
		name = strings.ReplaceAll(name, "\x00", "`")
		if !strings.Contains(name, ".") && s.schema != "" {
			name = s.schema + "." + name
		}
		return name
	}
	if s.schema != "" {
		name = s.schema + "." + name
	}
	return name
}

// Text is what an error may show of a statement: its beginning, up to the first row's data
// (INSERT ... VALUES), at most headLimit bytes, on one line. A COPY row shows nothing.
func (st statement) Text() string {
	if st.Row {
		return ""
	}
	h := st.head
	if i := bytes.Index(bytes.ToUpper(h), []byte(" VALUES ")); i >= 0 {
		h = h[:i+len(" VALUES ")]
	}
	return printable(string(h), headLimit, int(st.Bytes) > len(h))
}

func isLetter(b byte) bool { return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' }

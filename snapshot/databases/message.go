package databases

import (
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// What an error may hold of what a database's client wrote to stderr. Clients and servers quote
// statements and values in some messages (a syntax error's "near '...'", a duplicate key's
// value): errors, logs and journals get at most this much of it.
const (
	stderrKeep   = 8 << 10 // bytes of stderr kept in memory
	lineLimit    = 200     // bytes of each line
	messageLines = 4
	quotedLimit  = 64 // bytes of a quoted string in a message
)

// stderrBuffer keeps the beginning and the end of a client's stderr (the mysql client writes
// its error after echoing the failing statement) and counts what is between, so that a client
// echoing a huge statement neither fills memory nor an error.
type stderrBuffer struct {
	buf     []byte // the beginning
	tail    []byte // the last stderrKeep bytes after buf
	dropped int64
}

func (b *stderrBuffer) Write(p []byte) (int, error) {
	keep := min(len(p), stderrKeep-len(b.buf))
	b.buf = append(b.buf, p[:keep]...)
	if rest := p[keep:]; len(rest) > 0 {
		b.tail = append(b.tail, rest...)
		if over := len(b.tail) - stderrKeep; over > 0 {
			b.dropped += int64(over)
			b.tail = append(b.tail[:0], b.tail[over:]...)
		}
	}
	return len(p), nil
}

// text is what was kept, the beginning and the end on separate lines. The end starts in the
// middle of a line (of an echoed statement or a quoted value, often): that piece is left out.
func (b *stderrBuffer) text() []byte {
	if len(b.tail) == 0 {
		return b.buf
	}
	tail := b.tail[len(b.tail):]
	if i := bytes.IndexByte(b.tail, '\n'); i >= 0 {
		tail = b.tail[i+1:]
	}
	return append(append(append([]byte(nil), b.buf...), '\n'), tail...)
}

// clientError is a client program that failed in a database's pod, with what it said, cut down.
type clientError struct {
	err     error
	message string // clientMessage of its stderr
}

func (e *clientError) Error() string {
	if e.message == "" {
		return e.err.Error()
	}
	return e.err.Error() + ": " + e.message
}

func (e *clientError) Unwrap() error { return e.err }

// clientMessage is the one place that turns a client's stderr into text for an error: at most
// messageLines non-empty lines of at most lineLimit bytes each, without what may quote rows or
// statements (see dataLine and cutQuoted), control characters and invalid UTF-8 replaced.
func clientMessage(stderr []byte, dropped int64) string {
	var kept []string
	echo := false
	for _, l := range strings.Split(string(stderr), "\n") {
		l = strings.TrimSpace(l)
		// The mysql client echoes a failing statement between lines of dashes: left out, the
		// error names the statement itself (failedStatement).
		if l == echoRule {
			echo = !echo
			continue
		}
		if l == "" || echo {
			continue
		}
		switch m := dataLine.FindStringSubmatch(l); {
		case copyContext.MatchString(l):
			l = copyContext.FindString(l) + " (values not shown)"
		case m != nil && m[1] != "":
			l = m[1] + ":  (not shown: it may quote rows)"
		case m != nil:
			l = "(statement text not shown)"
		}
		kept = append(kept, l)
	}
	// A quoted value may hold line breaks: quotes are cut in the whole text, then the lines kept.
	var lines []string
	more := dropped > 0
	for _, l := range strings.Split(cutQuoted(strings.Join(kept, "\n")), "\n") {
		if l = strings.TrimSpace(l); l == "" {
			continue
		}
		if len(lines) == messageLines {
			more = true
			break
		}
		lines = append(lines, printable(l, lineLimit, false))
	}
	msg := strings.Join(lines, " | ")
	if more {
		msg += " (more cut)"
	}
	return msg
}

// echoRule is the line around the statement the mysql client echoes on an error.
const echoRule = "--------------"

// cutQuoted replaces each '...' and "..." string of a message by its length, unless the words in
// front of it say it names something (a key, a user, a table, a constraint), which is kept, cut
// to quotedLimit bytes: servers quote the values of rows (a duplicate key, a value that does not
// fit its column) and the text of statements ("near '...'") as well. A quote opens after a
// character that is not a letter or digit (not the apostrophe of "doesn't") and closes before
// one (not the apostrophe of "O'Brien").
func cutQuoted(s string) string {
	var out strings.Builder
	for {
		i := openingQuote(s)
		if i < 0 {
			out.WriteString(s)
			return out.String()
		}
		quote := s[i]
		out.WriteString(s[:i])
		name := namedBefore.MatchString(out.String())
		out.WriteByte(quote)
		s = s[i+1:]
		j := closingQuote(s, quote)
		switch {
		case !name:
			fmt.Fprintf(&out, "(%d bytes not shown)", j)
		case j > quotedLimit:
			out.WriteString(printable(s[:j], quotedLimit, true))
		default:
			out.WriteString(s[:j])
		}
		if j == len(s) {
			return out.String()
		}
		out.WriteByte(quote)
		s = s[j+1:]
	}
}

func openingQuote(s string) int {
	for i := 0; i < len(s); i++ {
		if (s[i] == '\'' || s[i] == '"') && (i == 0 || !isAlnum(s[i-1])) {
			return i
		}
	}
	return -1
}

// closingQuote is the index of the quote that closes a string s starts, or len(s).
func closingQuote(s string, quote byte) int {
	for j := 0; j < len(s); j++ {
		if s[j] == quote && (j+1 == len(s) || !isAlnum(s[j+1])) {
			return j
		}
	}
	return len(s)
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_'
}

// namedBefore matches the words in front of a quoted identifier in MySQL's and PostgreSQL's
// messages: "for key 'PRIMARY'", "user 'app'@'%'", "relation \"notes\"", "Couldn't execute '...'"
// (a client's own query).
var namedBefore = regexp.MustCompile(`(?i)(?:\b(?:key|column|user|table|database|schema|relation|constraint|index|function|procedure|trigger|view|sequence|type|role|field|event|definer|tablespace|extension|collation|variable|server|plugin|savepoint|execute)\s*|['"]@)$`)

// dataLine matches the lines of a client's messages that quote rows or statements whole:
// PostgreSQL's DETAIL (a key's or a failing row's values), CONTEXT (a COPY line) and LINE (the
// statement), and a statement a client echoes.
var dataLine = regexp.MustCompile(`^(?:(DETAIL|CONTEXT|LINE \d+):|(?i:INSERT|REPLACE|UPDATE|DELETE|COPY|VALUES|SELECT)\b|\()`)

// copyContext is the beginning of PostgreSQL's CONTEXT of a COPY row it refused, up to the
// column's name: "CONTEXT:  COPY users, line 3, column email".
var copyContext = regexp.MustCompile(`^CONTEXT:\s+COPY [^\s,:]+, line \d+(?:, column [^\s,:]+)?`)

// printable is s on one line in at most limit bytes (cut at a character's boundary, and marked
// with … when cut or when more follows), with control characters and invalid UTF-8 as '?'.
func printable(s string, limit int, more bool) string {
	var out strings.Builder
	for i, r := range s {
		w := utf8.RuneLen(r)
		if r == utf8.RuneError {
			w = 1
		}
		if out.Len()+w > limit {
			more = true
			break
		}
		bad := r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD")
		switch {
		case r == '\t' || r == '\n' || r == '\r':
			out.WriteByte(' ')
		case bad || r < 0x20 || r == 0x7f:
			out.WriteByte('?')
		default:
			out.WriteRune(r)
		}
	}
	if more {
		return out.String() + "…"
	}
	return out.String()
}

// clientLineRE finds the line of the client's input a client's error names: mysql's "ERROR 1064
// (42000) at line 12: ...", psql's "psql:<stdin>:12: ERROR: ...".
var clientLineRE = regexp.MustCompile(`(?m)(?:^ERROR \d+ \(\w+\) at line (\d+)|^psql:<stdin>:(\d+):)`)

// clientLine is the input line a client's message names, or 0.
func clientLine(message string) int64 {
	m := clientLineRE.FindStringSubmatch(message)
	if m == nil {
		return 0
	}
	n, _ := strconv.ParseInt(m[1]+m[2], 10, 64)
	return n
}

package databases

import (
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

// text is what was kept, the beginning and the end on separate lines.
func (b *stderrBuffer) text() []byte {
	if len(b.tail) == 0 {
		return b.buf
	}
	return append(append(append([]byte(nil), b.buf...), '\n'), b.tail...)
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
// messageLines non-empty lines of at most lineLimit bytes each, quoted strings cut to quotedLimit
// bytes, control characters and invalid UTF-8 replaced.
func clientMessage(stderr []byte, dropped int64) string {
	var lines []string
	more := dropped > 0
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
		if len(lines) == messageLines {
			more = true
			break
		}
		l = cutQuoted(l)
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

// cutQuoted shortens each '...' string in a message to quotedLimit bytes.
func cutQuoted(s string) string {
	if !strings.Contains(s, "'") {
		return s
	}
	var out strings.Builder
	for {
		i := strings.IndexByte(s, '\'')
		if i < 0 {
			out.WriteString(s)
			return out.String()
		}
		out.WriteString(s[:i+1])
		s = s[i+1:]
		j := strings.IndexByte(s, '\'')
		if j < 0 {
			j = len(s)
		}
		if j > quotedLimit {
			out.WriteString(printable(s[:j], quotedLimit, true))
		} else {
			out.WriteString(s[:j])
		}
		if j == len(s) {
			return out.String()
		}
		out.WriteByte('\'')
		s = s[j+1:]
	}
}

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

package databases

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ferrykube/ferry/snapshot"
)

// maxPacket is the largest max_allowed_packet MySQL and MariaDB accept, for servers and clients
// alike (1 GiB): ferry's clients use it, so the server's setting is the only limit.
const maxPacket = 1 << 30

// packetNeed is the max_allowed_packet a statement of n bytes needs: the packet holds the
// statement and a command byte; the server takes multiples of 1024.
func packetNeed(n int64) int64 {
	need := n + 1 + 1024
	return (need + 1023) / 1024 * 1024
}

// fitPacket makes sure the target's server takes the dump's largest statement before anything of
// the dump runs. mysqldump writes a row bigger than its buffer as one statement (binary columns
// hex, twice their size), so a row up to the server's max_allowed_packet needs a packet about
// that big. When the server's setting is smaller, fitPacket raises it (SET GLOBAL, which the
// load's new session gets) and returns the function that puts it back; when the user may not,
// the error names the table, the statement and the setting.
func (c Dumps) fitPacket(ctx context.Context, t target, d snapshot.Database, largest statement) (putBack func(context.Context) error, err error) {
	if largest.Bytes == 0 {
		return nil, nil
	}
	have, err := c.globalPacket(ctx, t)
	if err != nil {
		return nil, fmt.Errorf("read the target server's max_allowed_packet: %w", err)
	}
	need := packetNeed(largest.Bytes)
	if need <= have {
		return nil, nil
	}
	what := fmt.Sprintf("the dump's largest statement (%s at line %d, %d bytes: a row as dumped, binary columns in hex) needs max_allowed_packet %d; the target's server has %d",
		tableOrUnknown(largest.Table), largest.First, largest.Bytes, need, have)
	if need > maxPacket {
		return nil, fmt.Errorf("database %s: %s, and the servers' limit is %d: nothing was loaded", d.Name, what, int64(maxPacket))
	}
	if _, err := c.query(ctx, t.item, t.cfg.Container, t.cred, fmt.Sprintf("SET GLOBAL max_allowed_packet = %d;", need)); err != nil {
		return nil, fmt.Errorf("database %s: %s, and user %s may not raise it (%v): raise max_allowed_packet on the target's server to at least %d and restore again; nothing was loaded",
			d.Name, what, t.cred.user, err, need)
	}
	putBack = func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if _, err := c.query(ctx, t.item, t.cfg.Container, t.cred, fmt.Sprintf("SET GLOBAL max_allowed_packet = %d;", have)); err != nil {
			return fmt.Errorf("put the target server's max_allowed_packet back to %d (ferry raised it to %d for the load): %w", have, need, err)
		}
		return nil
	}
	if got, err := c.globalPacket(ctx, t); err != nil || got < need {
		return nil, errors.Join(fmt.Errorf("database %s: %s, and raising it did not take (now %d, %v); nothing was loaded", d.Name, what, got, err), putBack(ctx))
	}
	return putBack, nil
}

func (c Dumps) globalPacket(ctx context.Context, t target) (int64, error) {
	rows, err := c.query(ctx, t.item, t.cfg.Container, t.cred, "SELECT @@global.max_allowed_packet;")
	if err != nil {
		return 0, err
	}
	if len(rows) != 1 || len(rows[0]) != 1 {
		return 0, fmt.Errorf("the server answered %d rows", len(rows))
	}
	n, err := strconv.ParseInt(strings.TrimSpace(rows[0][0]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("the server answered %q", printable(rows[0][0], 40, false))
	}
	return n, nil
}

func tableOrUnknown(table string) string {
	if table == "" {
		return "a statement on no one table"
	}
	return "table " + table
}

package testbed

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// PostgreSQL is a PostgreSQL server on 127.0.0.1 standing in for a cluster's database.
type PostgreSQL struct {
	Name     string   `json:"name"`
	Port     int      `json:"port"`
	User     string   `json:"user"`
	Password string   `json:"password"`
	Process  *Process `json:"process"`
}

// Env returns the variables under which psql and pg_dump, run without options, reach this server.
func (p *PostgreSQL) Env() map[string]string {
	return map[string]string{"PGHOST": "127.0.0.1", "PGPORT": strconv.Itoa(p.Port), "PGUSER": p.User, "PGPASSWORD": p.Password}
}

// SQL runs statements with psql on the database db and returns the unaligned output.
func (p *PostgreSQL) SQL(ctx context.Context, bins Binaries, db, statements string) (string, error) {
	cmd := exec.CommandContext(ctx, bins["psql"], "-X", "-At", "-v", "ON_ERROR_STOP=1", "-d", db, "-c", statements)
	cmd.Env = os.Environ()
	for k, v := range p.Env() {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("psql %s: %w: %s", p.Name, err, out)
	}
	return string(out), nil
}

// postgresBin finds Debian's server programs (initdb, postgres), in /usr/lib/postgresql/N/bin.
func postgresBin(name string) (string, error) {
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/" + name)
	if len(matches) == 0 {
		return "", fmt.Errorf("%s not found in /usr/lib/postgresql/*/bin (Debian's postgresql package)", name)
	}
	return matches[len(matches)-1], nil
}

// serverCredential runs the server as the postgres user when this process is root: PostgreSQL
// refuses to run as root.
func serverCredential(dirs ...string) (*syscall.SysProcAttr, error) {
	attr := &syscall.SysProcAttr{}
	if os.Geteuid() != 0 {
		return attr, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL cannot run as root and there is no postgres user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	for _, d := range dirs {
		if err := os.Chown(d, uid, gid); err != nil {
			return nil, err
		}
	}
	attr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	return attr, nil
}

func startPostgres(ctx context.Context, bins Binaries, dir, name string) (*PostgreSQL, error) {
	// The server runs as another user, who must reach its folders.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	dataDir := filepath.Join(dir, "postgres-"+name)
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, err
	}
	p := &PostgreSQL{Name: name, User: "postgres", Password: sharedPassword}
	pwFile := filepath.Join(dir, "postgres-"+name+".pw")
	if err := os.WriteFile(pwFile, []byte(p.Password+"\n"), 0o644); err != nil {
		return nil, err
	}
	attr, err := serverCredential(dataDir)
	if err != nil {
		return nil, err
	}
	initdb := exec.CommandContext(ctx, bins["initdb"], "-D", dataDir, "-U", p.User, "--pwfile", pwFile, "--auth=scram-sha-256", "-E", "UTF8", "--locale=C")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: attr.Credential}
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb for %s: %w: %s", name, err, out)
	}
	if p.Port, err = freePort(); err != nil {
		return nil, err
	}
	args := []string{bins["postgres"], "-D", dataDir, "-h", "127.0.0.1", "-p", strconv.Itoa(p.Port), "-k", dataDir,
		"-c", "shared_buffers=16MB", "-c", "fsync=off"}
	if p.Process, err = startProcess("postgres-"+name, args, nil, filepath.Join(dir, "postgres-"+name+".log"), attr); err != nil {
		return nil, err
	}
	err = waitFor(p.Process, 60*time.Second, "accepting connections", func() error {
		_, err := p.SQL(ctx, bins, "postgres", "SELECT 1")
		return err
	})
	if err != nil {
		p.Process.stop(10 * time.Second)
		return nil, err
	}
	return p, nil
}

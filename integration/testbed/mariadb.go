package testbed

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// MariaDB is a MariaDB server on 127.0.0.1 standing in for a cluster's control-plane database.
type MariaDB struct {
	Name   string `json:"name"`
	Port   int    `json:"port"`
	Socket string `json:"socket"`
	User   string `json:"user"`
	// ClientHome holds a .my.cnf pointing clients at this server over TCP.
	ClientHome string   `json:"clientHome"`
	Password   string   `json:"password"`
	Process    *Process `json:"process"`
}

// Env returns the variables under which mysql/mariadb clients, run without options, reach this
// server over TCP with its password: what a database pod's exec gets in the testbed. HOME's
// .my.cnf covers the clients that ignore MYSQL_HOST (mysqldump).
func (d *MariaDB) Env() map[string]string {
	return map[string]string{"MYSQL_HOST": "127.0.0.1", "MYSQL_TCP_PORT": strconv.Itoa(d.Port), "MYSQL_PWD": d.Password, "USER": d.User, "HOME": d.ClientHome}
}

// SQL runs statements through the server's socket as root and returns the output (tab-separated).
func (d *MariaDB) SQL(ctx context.Context, bins Binaries, statements string) (string, error) {
	cmd := exec.CommandContext(ctx, bins["mariadb"], "--no-defaults", "--socket="+d.Socket, "-u", d.User, "--batch", "--skip-column-names", "-e", statements)
	cmd.Env = append(os.Environ(), "MYSQL_PWD="+d.Password)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("mariadb %s: %w: %s", d.Name, err, out)
	}
	return string(out), nil
}

func startMariaDB(ctx context.Context, bins Binaries, dir, name string) (*MariaDB, error) {
	dataDir := filepath.Join(dir, "mariadb-"+name)
	// A private tmpdir: two bootstraps sharing /tmp collide on their temporary tables' names.
	tmpDir := filepath.Join(dir, "mariadb-"+name+"-tmp")
	for _, d := range []string{dataDir, tmpDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	userArgs := []string{}
	if os.Geteuid() == 0 {
		userArgs = []string{"--user=root"} // mariadbd refuses root unless told
	}
	install := exec.CommandContext(ctx, bins["mariadb-install-db"], append([]string{"--no-defaults", "--datadir=" + dataDir,
		"--auth-root-authentication-method=normal", "--skip-test-db", "--tmpdir=" + tmpDir}, userArgs...)...)
	if out, err := install.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("mariadb-install-db for %s: %w: %s", name, err, out)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	d := &MariaDB{Name: name, Port: port, Socket: filepath.Join(dataDir, "mysqld.sock"), User: "root", Password: sharedPassword,
		ClientHome: filepath.Join(dir, "mariadb-"+name+"-client")}
	if err := os.MkdirAll(d.ClientHome, 0o755); err != nil {
		return nil, err
	}
	cnf := fmt.Sprintf("[client]\nhost=127.0.0.1\nport=%d\nprotocol=TCP\n", port)
	if err := os.WriteFile(filepath.Join(d.ClientHome, ".my.cnf"), []byte(cnf), 0o644); err != nil {
		return nil, err
	}
	args := append([]string{bins["mariadbd"], "--no-defaults", "--datadir=" + dataDir, "--port=" + strconv.Itoa(port),
		"--socket=" + d.Socket, "--bind-address=127.0.0.1", "--tmpdir=" + tmpDir, "--pid-file=" + filepath.Join(dataDir, "mysqld.pid"),
		"--skip-name-resolve", "--innodb-buffer-pool-size=32M", "--log-error=" + filepath.Join(dir, "mariadb-"+name+".log")}, userArgs...)
	d.Process, err = startProcess("mariadb-"+name, args, nil, filepath.Join(dir, "mariadb-"+name+".out"), nil)
	if err != nil {
		return nil, err
	}
	d.Process.Log = filepath.Join(dir, "mariadb-"+name+".log")
	// The fresh server's root has no password yet: wait until it answers, then give root one, for
	// socket and TCP clients alike.
	client := func(sql string) error {
		out, err := exec.CommandContext(ctx, bins["mariadb"], "--no-defaults", "--socket="+d.Socket, "-uroot", "-e", sql).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		return nil
	}
	err = waitFor(d.Process, 60*time.Second, "accepting connections", func() error { return client("SELECT 1") })
	if err == nil {
		err = client(fmt.Sprintf(`CREATE USER IF NOT EXISTS 'root'@'127.0.0.1';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
ALTER USER 'root'@'127.0.0.1' IDENTIFIED BY '%[1]s';
ALTER USER 'root'@'localhost' IDENTIFIED BY '%[1]s';`, d.Password))
	}
	if err != nil {
		d.Process.stop(10 * time.Second)
		return nil, fmt.Errorf("mariadb %s: %w", name, err)
	}
	return d, nil
}

package testbed

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Process is a server the testbed started itself (MinIO, MariaDB); clusters are kwokctl's.
type Process struct {
	Name string   `json:"name"`
	PID  int      `json:"pid"`
	Args []string `json:"args"`
	Log  string   `json:"log"`

	done chan struct{} // closed when the process was reaped by this process
}

// startProcess runs args in its own session, so that a terminal's Ctrl-C reaches the testbed's
// owner first, with output to logPath. attr may add a user to run as.
func startProcess(name string, args, env []string, logPath string, attr *syscall.SysProcAttr) (*Process, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if attr == nil {
		attr = &syscall.SysProcAttr{}
	}
	attr.Setsid = true
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{Name: name, PID: cmd.Process.Pid, Args: args, Log: logPath, done: make(chan struct{})}
	go func() { cmd.Wait(); close(p.done) }()
	return p, nil
}

// exited reports whether the process has ended.
func (p *Process) exited() bool {
	if p.done != nil {
		select {
		case <-p.done:
			return true
		default:
			return false
		}
	}
	return syscall.Kill(p.PID, 0) != nil
}

// ours reports whether PID still runs the program the testbed started, so that a recycled PID is
// never signalled.
func (p *Process) ours() bool {
	if p.exited() {
		return false
	}
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(p.PID) + "/cmdline")
	if err != nil {
		return false
	}
	first, _, _ := bytes.Cut(cmdline, []byte{0})
	return string(first) == p.Args[0]
}

// stop ends the process: SIGTERM, then SIGKILL after a grace period.
func (p *Process) stop(grace time.Duration) error {
	if !p.ours() {
		return nil
	}
	syscall.Kill(p.PID, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if p.exited() {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	syscall.Kill(p.PID, syscall.SIGKILL)
	for range 100 {
		if p.exited() {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s (pid %d) did not end", p.Name, p.PID)
}

// tail returns the end of the process's log, for error messages.
func (p *Process) tail() string {
	data, _ := os.ReadFile(p.Log)
	if len(data) > 2000 {
		data = data[len(data)-2000:]
	}
	return string(data)
}

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitFor polls check until it succeeds, the process dies or the timeout passes.
func waitFor(p *Process, timeout time.Duration, what string, check func() error) error {
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = check(); err == nil {
			return nil
		}
		if p != nil && p.exited() {
			return fmt.Errorf("%s exited before %s; log %s:\n%s", p.Name, what, p.Log, p.tail())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err == nil {
		err = errors.New("timed out")
	}
	return fmt.Errorf("%s: not %s after %s: %w", p.Name, what, timeout, err)
}

// killUnder ends every process whose executable lies under dir: the cluster components kwokctl
// copied into a testbed's folder, when kwokctl could not delete a half-created cluster.
func killUnder(dir string) {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink("/proc/" + e.Name() + "/exe")
		if err != nil || !strings.HasPrefix(exe, dir+string(os.PathSeparator)) {
			continue
		}
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

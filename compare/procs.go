package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proc is one server process started by the tool. It is stopped by its PID
// and nothing else: the tool never signals a process it did not start.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited and been reaped
	err  error         // Wait's result, set before done is closed
	log  string        // path of its combined stdout and stderr
}

// procSet owns every process started in one system's slot.
type procSet struct {
	logDir string
	procs  []*proc
}

// start runs bin with args and env (added to the tool's environment) in a
// process group of its own, so that a Ctrl-C at the terminal reaches only
// the tool, which then stops its children by PID.
func (s *procSet) start(name, bin string, args, env []string) (*proc, error) {
	logPath := filepath.Join(s.logDir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("compare: %s: %w", name, err)
	}
	defer f.Close() // the child holds its own descriptor
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	// Pdeathsig: should the tool die without stopping it, the kernel
	// kills the child.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("compare: start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{}), log: logPath}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	s.procs = append(s.procs, p)
	return p, nil
}

// pid returns the process's ID.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL to the process (by PID) and waits for it to be reaped.
func (p *proc) kill() {
	if !p.exited() {
		_ = syscall.Kill(p.pid(), syscall.SIGKILL)
	}
	<-p.done
}

// stop asks the process to end with SIGTERM and kills it if it has not
// ended within grace.
func (p *proc) stop(grace time.Duration) {
	if p.exited() {
		return
	}
	_ = syscall.Kill(p.pid(), syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.kill()
	}
}

// stopAll stops every process of the set, all at once, each by its PID.
func (s *procSet) stopAll(grace time.Duration) {
	for _, p := range s.procs {
		if !p.exited() {
			_ = syscall.Kill(p.pid(), syscall.SIGTERM)
		}
	}
	deadline := time.After(grace)
	for _, p := range s.procs {
		select {
		case <-p.done:
		case <-deadline:
			p.kill()
		}
	}
	s.procs = nil
}

// cpuTicks returns the user plus system CPU time, in clock ticks, of every
// live process of the set (from /proc/PID/stat).
func (s *procSet) cpuTicks() int64 {
	var t int64
	for _, p := range s.procs {
		if p.exited() {
			continue
		}
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p.pid()) + "/stat")
		if err != nil {
			continue
		}
		// The command name (field 2) may hold spaces: fields are counted
		// after its closing parenthesis.
		rest := string(b)
		if i := strings.LastIndexByte(rest, ')'); i >= 0 {
			rest = rest[i+1:]
		}
		f := strings.Fields(rest)
		if len(f) > 12 { // utime and stime are fields 14 and 15: 12 and 13 here
			u, _ := strconv.ParseInt(f[11], 10, 64)
			st, _ := strconv.ParseInt(f[12], 10, 64)
			t += u + st
		}
	}
	return t
}

// clockTick is the length of one clock tick of /proc/PID/stat (USER_HZ is
// 100 on Linux).
const clockTick = 10 * time.Millisecond

// freePorts returns n distinct TCP ports of host (a loopback address) that
// the OS reports free: each is bound, then released just before the server
// binds it.
func freePorts(host string, n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, fmt.Errorf("compare: free port: %w", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// errNotReady is returned when a system does not become ready in time.
var errNotReady = errors.New("compare: not ready")

// waitFor calls ready every 50 ms until it returns nil, the process set
// loses a process, or timeout passes.
func waitFor(ctx context.Context, s *procSet, timeout time.Duration, ready func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		for _, p := range s.procs {
			if p.exited() {
				return fmt.Errorf("%w: %s exited (%v); see %s", errNotReady, p.name, p.err, p.log)
			}
		}
		cctx, ccancel := context.WithTimeout(ctx, time.Second)
		last = ready(cctx)
		ccancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w after %v: %v", errNotReady, timeout, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// loadAvg returns the 1-minute load average of the machine.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

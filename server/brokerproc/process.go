// Package brokerproc starts a lanes broker binary as a child process and stops it again. It is
// what the server's process-level tests, the conformance runner and the benchmark harness share,
// so that all three refuse a port someone else holds, take the broker down with them when they
// die, and notice when /health was answered by another process. It is test tooling, not a
// supported API: it may change with the harnesses that use it.
package brokerproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrAddrInUse is returned by Start when something already accepts connections on an address
// the broker would listen on.
var ErrAddrInUse = errors.New("address already in use")

// Options describe one broker process.
type Options struct {
	// Binary is the lanes executable.
	Binary string
	// DatabaseURL becomes LANES_DATABASE_URL.
	DatabaseURL string
	// Port is the HTTP port on 127.0.0.1; 0 picks a free one.
	Port int
	// SpoolDir becomes LANES_SPOOL_DIR.
	SpoolDir string
	// Env holds further LANES_* settings ("KEY=value"); they override the ones above.
	Env []string
	// OtherAddrs are further addresses the broker will listen on (its pprof address) that
	// must be free as well.
	OtherAddrs []string
	// Output receives the broker's stdout and stderr; nil discards them.
	Output io.Writer
}

// Process is a running broker started by Start.
type Process struct {
	// URL is the broker's base URL, http://127.0.0.1:<port>.
	URL string
	// Port is the broker's HTTP port.
	Port int

	cmd     *exec.Cmd
	tail    *TailBuffer
	done    chan struct{}
	waitErr error
}

// Start checks that the broker's addresses are free and starts it; it does not wait for it to
// answer (see WaitHealth and StartHealthy). The broker runs in its own process group, so a
// terminal's Ctrl-C reaches only the caller, which stops it in order, and it gets SIGTERM when
// the caller dies, even from SIGKILL (Linux's parent-death signal).
func Start(o Options) (*Process, error) {
	if _, err := os.Stat(o.Binary); err != nil {
		return nil, fmt.Errorf("broker binary: %w", err)
	}
	port := o.Port
	if port == 0 {
		var err error
		if port, err = FreePort(); err != nil {
			return nil, err
		}
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for _, a := range append([]string{addr}, o.OtherAddrs...) {
		if a != "" && accepting(a) {
			return nil, fmt.Errorf("%s is taken (a broker left over from an earlier run?): %w", a, ErrAddrInUse)
		}
	}
	p := &Process{URL: "http://" + addr, Port: port, tail: NewTailBuffer(8 << 10), done: make(chan struct{})}
	var out io.Writer = p.tail
	if o.Output != nil {
		out = io.MultiWriter(o.Output, p.tail)
	}
	p.cmd = exec.CommandContext(context.Background(), o.Binary)
	p.cmd.Env = append(os.Environ(),
		"LANES_DATABASE_URL="+o.DatabaseURL,
		"LANES_BIND_ADDR=127.0.0.1",
		fmt.Sprintf("LANES_PORT=%d", port),
		"LANES_SPOOL_DIR="+o.SpoolDir,
	)
	p.cmd.Env = append(p.cmd.Env, o.Env...)
	p.cmd.Stdout, p.cmd.Stderr = out, out
	// Pdeathsig fires when the thread that forked exits; Go keeps its threads for the life of
	// the process unless a goroutine locked to one ends, which nothing here does.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { p.waitErr = p.cmd.Wait(); close(p.done) }()
	return p, nil
}

// StartHealthy starts the broker and waits until GET /health answers 200; on failure the
// broker is stopped and the error carries the end of its output.
func StartHealthy(ctx context.Context, o Options) (*Process, error) {
	p, err := Start(o)
	if err != nil {
		return nil, err
	}
	if err := p.WaitHealth(ctx, http.StatusOK); err != nil {
		p.Stop(0)
		return nil, err
	}
	return p, nil
}

// WaitHealth polls GET /health until it answers want. It fails when the broker exits first,
// when ctx ends, and when the broker has exited by the time want came back: then another
// process answered on its port.
func (p *Process) WaitHealth(ctx context.Context, want int) error {
	last := 0
	for {
		select {
		case <-p.done:
			return fmt.Errorf("broker exited while waiting for /health (%w); its output ends:\n%s", p.waitErr, p.tail)
		default:
		}
		if status, err := healthStatus(ctx, p.URL); err == nil {
			last = status
			if status == want {
				select {
				case <-p.done:
					return fmt.Errorf("another process answered /health on port %d: the broker exited (%w); its output ends:\n%s", p.Port, p.waitErr, p.tail)
				default:
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("broker /health did not answer %d (last %d): %w; its output ends:\n%s", want, last, ctx.Err(), p.tail)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func healthStatus(ctx context.Context, base string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/health", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// Pid is the broker's process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the broker has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is how the broker exited; it is meaningful once Done is closed.
func (p *Process) Err() error {
	<-p.done
	return p.waitErr
}

// Signal sends sig to the broker.
func (p *Process) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Stop sends SIGTERM and waits up to grace for the broker to exit, then kills it; a grace of 0
// kills at once. It returns once the process is gone and may be called more than once.
func (p *Process) Stop(grace time.Duration) {
	if grace > 0 {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
			return
		case <-time.After(grace):
		}
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Output is the end of what the broker has written (its last 8 KiB).
func (p *Process) Output() string { return p.tail.String() }

// FreePort asks the kernel for a TCP port on 127.0.0.1 that nothing listens on now.
func FreePort() (int, error) {
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// accepting reports whether something accepts TCP connections on addr.
func accepting(addr string) bool {
	c, err := (&net.Dialer{Timeout: 200 * time.Millisecond}).DialContext(context.Background(), "tcp", addr)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// TailBuffer keeps the last bytes written to it: the end of a child process's
// output, for error messages. It is safe for concurrent use.
type TailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

// NewTailBuffer keeps the last limit bytes.
func NewTailBuffer(limit int) *TailBuffer { return &TailBuffer{max: limit} }

func (t *TailBuffer) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(b), nil
}

// String returns what is kept, without trailing newlines.
func (t *TailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimRight(string(t.buf), "\n")
}

// Reset forgets what was written.
func (t *TailBuffer) Reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = t.buf[:0]
}

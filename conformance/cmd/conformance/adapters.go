package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/lanesmq/lanes/server/brokerproc"
)

// sdk is one SDK client under test (python-async is sdk-python's AsyncLanes): how to prepare
// and start its adapter.
type sdk struct {
	Name    string
	Prepare func(repo, tmp string) ([]string, error) // returns the adapter command line
}

var sdks = []sdk{
	{Name: "go", Prepare: func(repo, tmp string) ([]string, error) {
		bin := filepath.Join(tmp, "adapter-go")
		cmd := exec.CommandContext(context.Background(), "go", "build", "-o", bin, "./conformance/adapters/go")
		cmd.Dir = repo
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go build ./conformance/adapters/go: %w\n%s", err, out)
		}
		return []string{bin}, nil
	}},
	{Name: "js", Prepare: func(repo, tmp string) ([]string, error) {
		dist := filepath.Join(repo, "sdk-js", "dist")
		if _, err := os.Stat(dist); err != nil {
			return nil, fmt.Errorf("sdk-js is not built (%s missing): run `npm run build` in sdk-js (make conformance does)", dist)
		}
		node, err := exec.LookPath("node")
		if err != nil {
			return nil, fmt.Errorf("node not found on PATH")
		}
		// The adapter imports @lanesmq/lanes; link it to the sdk-js build as `npm install` of
		// its file: dependency would.
		mods := filepath.Join(repo, "conformance", "adapters", "js", "node_modules", "@lanesmq")
		link := filepath.Join(mods, "lanes")
		if _, err := os.Stat(filepath.Join(link, "package.json")); err != nil {
			if err := os.MkdirAll(mods, 0o755); err != nil {
				return nil, err
			}
			_ = os.Remove(link)
			if err := os.Symlink(filepath.Join("..", "..", "..", "..", "..", "sdk-js"), link); err != nil {
				return nil, fmt.Errorf("linking @lanesmq/lanes to sdk-js: %w", err)
			}
		}
		return []string{node, filepath.Join(repo, "conformance", "adapters", "js", "adapter.mjs")}, nil
	}},
	{Name: "python", Prepare: pythonAdapter()},
	{Name: "python-async", Prepare: pythonAdapter("--async")},
}

// pythonAdapter starts the Python adapter in the sdk-python venv: the blocking client, or with
// --async the asyncio one, through the same steps.
func pythonAdapter(args ...string) func(repo, tmp string) ([]string, error) {
	return func(repo, _ string) ([]string, error) {
		py := filepath.Join(repo, "sdk-python", ".venv", "bin", "python")
		if _, err := os.Stat(py); err != nil {
			return nil, fmt.Errorf("the sdk-python venv is missing (%s): run `make deps-python` (make conformance does)", py)
		}
		return append([]string{py, filepath.Join(repo, "conformance", "adapters", "python", "adapter.py")}, args...), nil
	}
}

// sdkNames lists the SDKs of the sdks table, comma-separated: the default of -sdk.
func sdkNames() string {
	names := make([]string, len(sdks))
	for i, s := range sdks {
		names[i] = s.Name
	}
	return strings.Join(names, ",")
}

// adapterProc is one running adapter: cases go in as JSON Lines on stdin, results come out as
// JSON Lines on stdout; stderr is kept for failure reports.
type adapterProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan []byte
	stderr *brokerproc.TailBuffer
	dead   chan struct{}
}

func startAdapter(argv []string, dir string) (*adapterProc, error) {
	cmd := exec.CommandContext(context.Background(), argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = os.Environ()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p := &adapterProc{cmd: cmd, stdin: stdin, lines: make(chan []byte, 1), stderr: brokerproc.NewTailBuffer(8 << 10), dead: make(chan struct{})}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			line := bytes.TrimSpace(sc.Bytes())
			if len(line) == 0 || line[0] != '{' {
				continue // adapters may print nothing else, but be lenient
			}
			p.lines <- append([]byte(nil), line...)
		}
		_ = cmd.Wait()
		close(p.dead)
	}()
	return p, nil
}

var errAdapterTimeout = errors.New("adapter timed out")

// run sends one case and waits for its result line.
func (p *adapterProc) run(in map[string]any, timeout time.Duration) (map[string]any, error) {
	b, err := json.Marshal(in)
	if err != nil {
		return nil, err
	}
	if _, err := p.stdin.Write(append(b, '\n')); err != nil {
		return nil, fmt.Errorf("adapter stdin: %w; stderr: %s", err, p.stderr.String())
	}
	select {
	case line := <-p.lines:
		var out map[string]any
		if err := json.Unmarshal(line, &out); err != nil {
			return nil, fmt.Errorf("adapter printed a line that is not JSON: %s", truncate(string(line), 300))
		}
		return out, nil
	case <-p.dead:
		return nil, fmt.Errorf("adapter exited (%v); stderr: %s", p.cmd.ProcessState, p.stderr.String())
	case <-time.After(timeout):
		return nil, errAdapterTimeout
	}
}

// kill ends the adapter's process group.
func (p *adapterProc) kill() {
	_ = p.stdin.Close()
	select {
	case <-p.dead:
		return
	case <-time.After(2 * time.Second):
	}
	if p.cmd.Process != nil {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	}
	<-p.dead
}

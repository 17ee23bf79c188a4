package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lanesmq/lanes/server/brokerproc"
)

// cluster is the soak's PostgreSQL (scripts/pg.sh, durable: a crash must not lose a commit
// that was answered), its two brokers on one database and a TCP proxy in front of each, whose
// connections a fault drops.
type cluster struct {
	root    string
	pgEnv   []string
	dbURL   string
	dir     string
	brokers []*brokerSlot
	proxies []*proxy
}

// brokerSlot is one broker port: the process on it changes with every kill and restart, its
// spool directory stays, so what a killed broker spooled drains after its restart.
type brokerSlot struct {
	mu   sync.Mutex
	opts brokerproc.Options
	proc *brokerproc.Process
	log  *os.File
}

func (c *cluster) pg(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(c.root, "scripts", "pg.sh"), args...)
	cmd.Env = c.pgEnv
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("scripts/pg.sh %v: %w: %s", args, err, out)
	}
	return nil
}

// startCluster starts PostgreSQL with a fresh database, both brokers and their proxies.
func startCluster(ctx context.Context, root string, cfg config) (*cluster, error) {
	c := &cluster{root: root, dir: cfg.runDir}
	c.pgEnv = append(os.Environ(),
		"LANES_PG_PORT="+strconv.Itoa(cfg.pgPort),
		"LANES_PG_DIR="+cfg.pgDir,
		"LANES_PG_FAST=0",
		"LANES_PG_DB=postgres",
	)
	if err := c.pg(ctx, "start"); err != nil {
		return nil, err
	}
	const db = "lanes_soak"
	if err := c.pg(ctx, "psql", "-d", "postgres", "-c", "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)", "-c", "CREATE DATABASE "+db); err != nil {
		return nil, err
	}
	// A longer WAL writer delay leaves asynchronous commits (acks, leased pops) unflushed for
	// longer, so more crashes undo some: what the promise must survive.
	if err := c.pg(ctx, "psql", "-d", "postgres", "-c", "ALTER SYSTEM SET wal_writer_delay = "+quoteLiteral(cfg.walWriterDelay), "-c", "SELECT pg_reload_conf()"); err != nil {
		return nil, err
	}
	c.dbURL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", cfg.pgPort, db)
	for i, port := range cfg.brokerPorts {
		logf, err := os.Create(filepath.Join(cfg.runDir, fmt.Sprintf("broker-%d.log", i)))
		if err != nil {
			return nil, err
		}
		spool := filepath.Join(cfg.runDir, fmt.Sprintf("spool-%d", i))
		if err := os.MkdirAll(spool, 0o755); err != nil {
			return nil, err
		}
		slot := &brokerSlot{log: logf, opts: brokerproc.Options{
			Binary: cfg.bin, DatabaseURL: c.dbURL, Port: port, SpoolDir: spool, Output: logf,
			Env: append([]string{"LANES_LOG_LEVEL=warn", "LANES_DB_POOL_SIZE=10"}, cfg.brokerEnv...),
		}}
		c.brokers = append(c.brokers, slot)
		if err := slot.start(ctx); err != nil {
			c.stop()
			return nil, err
		}
		px, err := startProxy(cfg.proxyPorts[i], port)
		if err != nil {
			c.stop()
			return nil, err
		}
		c.proxies = append(c.proxies, px)
	}
	return c, nil
}

// start runs the broker and waits until /health answers 200, which takes as long as
// PostgreSQL is down.
func (b *brokerSlot) start(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	for {
		p, err := brokerproc.Start(b.opts)
		if errors.Is(err, brokerproc.ErrAddrInUse) && ctx.Err() == nil {
			time.Sleep(100 * time.Millisecond) // the killed process's socket is still closing
			continue
		}
		if err != nil {
			return err
		}
		b.mu.Lock()
		b.proc = p
		b.mu.Unlock()
		err = p.WaitHealth(ctx, 200)
		if err == nil || ctx.Err() != nil {
			return err
		}
		// It exited during startup (the database refused it mid-boot): start it again.
		fmt.Fprintf(b.log, "soak: broker exited during startup, starting it again: %v\n", err)
		time.Sleep(200 * time.Millisecond)
	}
}

// kill SIGKILLs the broker and waits until it is gone.
func (b *brokerSlot) kill() {
	b.mu.Lock()
	p := b.proc
	b.mu.Unlock()
	if p != nil {
		p.Stop(0)
	}
}

func (b *brokerSlot) stop() {
	b.mu.Lock()
	p := b.proc
	b.mu.Unlock()
	if p != nil {
		p.Stop(10 * time.Second)
	}
	_ = b.log.Close()
}

func (c *cluster) stop() {
	for _, p := range c.proxies {
		p.close()
	}
	for _, b := range c.brokers {
		b.stop()
	}
	_ = c.pg(context.Background(), "psql", "-d", "postgres", "-c", "ALTER SYSTEM RESET wal_writer_delay")
	_ = c.pg(context.Background(), "stop")
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// proxy forwards a port to a broker and can drop every connection through it at once, which
// the clients see as a connection reset mid-request (or mid-answer).
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
}

func startProxy(port, target int) (*proxy, error) {
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return nil, fmt.Errorf("proxy port %d: %w", port, err)
	}
	p := &proxy{ln: ln, target: fmt.Sprintf("127.0.0.1:%d", target), conns: map[net.Conn]struct{}{}}
	go p.accept()
	return p, nil
}

func (p *proxy) url() string { return "http://" + p.ln.Addr().String() }

func (p *proxy) accept() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.serve(in)
	}
}

func (p *proxy) serve(in net.Conn) {
	out, err := (&net.Dialer{Timeout: 2 * time.Second}).DialContext(context.Background(), "tcp", p.target)
	if err != nil {
		_ = in.Close()
		return
	}
	p.track(in, out)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(out, in)
	go pipe(in, out)
	<-done
	<-done
	p.untrack(in, out)
	_ = in.Close()
	_ = out.Close()
}

func (p *proxy) track(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
}

func (p *proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
	}
}

// dropAll resets every connection through the proxy (RST, not FIN: a client sees its
// connection broken, as when a load balancer or the network drops it); it returns how many.
func (p *proxy) dropAll() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
	n := len(p.conns)
	clear(p.conns)
	return n / 2
}

func (p *proxy) close() {
	_ = p.ln.Close()
	p.dropAll()
}

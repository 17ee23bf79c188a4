package api

import (
	"context"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"
)

// dbProxy forwards TCP connections to the test database until cut: then it
// resets every open connection and every new one, a database outage as the
// broker sees it, without stopping the database other tests use.
type dbProxy struct {
	listener net.Listener
	target   string

	mu    sync.Mutex
	down  bool
	conns map[net.Conn]bool
}

// startDBProxy proxies dsn's host and returns the proxy and a DSN through it.
func startDBProxy(t *testing.T, dsn string) (*dbProxy, string) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &dbProxy{listener: l, target: u.Host, conns: map[net.Conn]bool{}}
	t.Cleanup(func() { _ = l.Close(); p.cut() })
	go p.serve()
	u.Host = l.Addr().String()
	return p, u.String()
}

func (p *dbProxy) serve() {
	for {
		client, err := p.listener.Accept()
		if err != nil {
			return
		}
		go p.forward(client)
	}
}

func (p *dbProxy) forward(client net.Conn) {
	p.mu.Lock()
	down := p.down
	p.mu.Unlock()
	if down {
		_ = client.Close()
		return
	}
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = client.Close()
		return
	}
	p.mu.Lock()
	p.conns[client], p.conns[server] = true, true
	p.mu.Unlock()
	go func() { _, _ = io.Copy(server, client); _ = server.Close() }()
	_, _ = io.Copy(client, server)
	_ = client.Close()
}

// cut starts the outage: open connections close, new ones are refused.
func (p *dbProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
}

// restore ends the outage.
func (p *dbProxy) restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = false
}

// lanes_db_healthy is registered on a broker without a spool too, and
// follows a real outage: 1 while the database answers, 0 once it stops, 1
// again when it is back; lanes_spool_db_healthy only exists with a spool.
func TestDBHealthyGaugeFollowsAnOutageWithoutASpool(t *testing.T) {
	proxy, dsn := startDBProxy(t, testDSN)
	b := newBrokerWith(t, dsn, Options{}, "")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go b.Server.RunMaintenanceRefresh(ctx) // as main.go starts it once the schema is applied
	gauge := func() float64 {
		got := scrape(t, b.URL)
		if _, ok := got["lanes_spool_db_healthy"]; ok {
			t.Fatal("lanes_spool_db_healthy exported by a broker without a spool")
		}
		v, ok := got["lanes_db_healthy"]
		if !ok {
			t.Fatal("lanes_db_healthy not exported by a broker without a spool")
		}
		return v
	}
	if v := gauge(); v != 1 {
		t.Fatalf("lanes_db_healthy = %v with the database up, want 1", v)
	}
	proxy.cut()
	waitFor(t, 10*time.Second, "lanes_db_healthy 0 during the outage", func() bool { return gauge() == 0 })
	proxy.restore()
	waitFor(t, 10*time.Second, "lanes_db_healthy 1 with the database back", func() bool { return gauge() == 1 })
}

// With a spool, both gauges are there, and lanes_db_healthy leaves out the
// spool's part: after a push spooled for want of the database, the database
// answering again makes lanes_db_healthy 1 while lanes_spool_db_healthy stays
// 0 until a drain succeeds.
func TestDBHealthyGaugeLeavesOutTheSpool(t *testing.T) {
	proxy, dsn := startDBProxy(t, testDSN)
	b := newBrokerWith(t, dsn, Options{PushTimeout: 2 * time.Second}, t.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go b.Server.RunMaintenanceRefresh(ctx)
	q := uniqueQueue(t)
	proxy.cut()
	var res []pushResult
	if status, _ := b.call(t, "POST", "/api/v1/push", pushItems(q, 1), &res); status != 201 || len(res) != 1 || res[0].Status != "buffered" {
		t.Fatalf("push during the outage: %d %+v", status, res)
	}
	proxy.restore()
	waitFor(t, 10*time.Second, "lanes_db_healthy 1 with the database back", func() bool { return scrape(t, b.URL)["lanes_db_healthy"] == 1 })
	if v := scrape(t, b.URL)["lanes_spool_db_healthy"]; v != 0 {
		t.Fatalf("lanes_spool_db_healthy = %v before any drain, want 0", v)
	}
	b.runDrain(t)
	waitFor(t, 10*time.Second, "lanes_spool_db_healthy 1 after the drain", func() bool { return scrape(t, b.URL)["lanes_spool_db_healthy"] == 1 })
}

package engine

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lanesmq/lanes/server/internal/testdb"
)

// listenerPID waits for e's notification listener to be on LISTEN from a
// backend other than previous, and returns that backend's pid.
func listenerPID(t *testing.T, e *Engine, previous int32) int32 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var pid int32
		err := e.pool.QueryRow(context.Background(), `SELECT coalesce(max(pid), 0) FROM pg_stat_activity
			WHERE datname = current_database() AND query = 'LISTEN `+notifyChannel+`' AND pid <> $1`, previous).Scan(&pid)
		if err != nil {
			t.Fatal(err)
		}
		if pid != 0 {
			return pid
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no listener other than backend %d", previous)
	return 0
}

// Each reconnect of the listener that gets back on LISTEN starts its backoff
// over: the sixth lost connection in a row is back after about the first
// delay, not after waiting out 3.2 s of doubling. That wait is the bound:
// without the start over the sixth reconnect cannot come sooner however idle
// the machine, and with it every reconnect has 3.1 s to spare on a loaded one
// (the bound was 400 ms past the first delay before).
func TestListenerBackoffStartsOverAfterAReconnect(t *testing.T) {
	const losses = 6
	withoutStartOver := listenReconnectFirst << (losses - 1) // the last loss's delay if the backoff kept doubling
	if withoutStartOver >= listenReconnectMax {
		t.Fatalf("the backoff caps at %v before loss %d: too few doublings to tell a start over apart", listenReconnectMax, losses)
	}
	// Unwatched: listenerPID finds the listener by its last statement, LISTEN,
	// and a PoolWatch has it read the server's start time after that.
	e := newUnwatchedEngine(t)
	pid := listenerPID(t, e, 0)
	for i := 1; i <= losses; i++ {
		lost := time.Now()
		if _, err := e.pool.Exec(context.Background(), `SELECT pg_terminate_backend($1)`, pid); err != nil {
			t.Fatal(err)
		}
		pid = listenerPID(t, e, pid)
		back := time.Since(lost)
		t.Logf("reconnect %d: back on LISTEN after %v", i, back)
		if back >= withoutStartOver {
			t.Fatalf("reconnect %d took %v, as long as the backoff would wait had it not started over", i, back)
		}
	}
}

// TestFailingNotificationsLogOneWarning: when pg_notify keeps failing (the
// database's notification queue full, or the database gone) every push
// commit's flush fails; the first logs a WARN, the rest within the minute
// add no line.
func TestFailingNotificationsLogOneWarning(t *testing.T) {
	e, out := newUnreachableEngine(t)
	for i := range 4 {
		// Queued without a kick and flushed here, so each flush has ended
		// before the count below.
		e.notifier.mu.Lock()
		e.notifier.pending[fmt.Sprint("notify-failing-", i)] = true
		e.notifier.mu.Unlock()
		e.notifier.flush()
	}
	if n := strings.Count(out.String(), `level=WARN msg="notify other brokers failed`); n != 1 {
		t.Fatalf("want one WARN line for 4 failing flushes, got %d:\n%s", n, out.String())
	}
}

// A queue name may hold a line break, and a notification lists one name a
// line: another broker's push to such a queue still wakes a pop parked on it
// at once, not at its next re-check.
func TestLongPollWakesAcrossBrokersOnAQueueNamedWithALineBreak(t *testing.T) {
	a, b := newEngineWithoutRechecks(t), newEngine(t)
	q := queueName(t) + "\nsecond line"
	mustPop(t, a, PopRequest{Queue: q}) // creates the queue
	waitListening(t, a)
	wakeParkedPop(t, a, b, q)
}

// waitListening waits until e's notification listener is on LISTEN: a push
// through another broker before then wakes nobody here, and a test timing a
// wake would time a re-check instead.
func waitListening(t *testing.T, e *Engine) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !e.listening.Load(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the notification listener did not attach within 10 s")
		}
	}
}

// listenQuery is what the notification listener sends first on each of its
// connections; a test proxy tells the listener's connections by it.
const listenQuery = "LISTEN " + notifyChannel

// newEngineThrough is newEngine with every connection through proxy.
func newEngineThrough(t *testing.T, proxy *testdb.Proxy, engineCfg Config) *Engine {
	t.Helper()
	return newEngineThroughWith(t, proxy, engineCfg, false)
}

// newWatchedEngineThrough is newEngineThrough with its pool configured as the
// broker's (ConfigurePool): the engine knows the pool's open connections,
// and the listener reads the server's start time as it connects.
func newWatchedEngineThrough(t *testing.T, proxy *testdb.Proxy, engineCfg Config) *Engine {
	t.Helper()
	return newEngineThroughWith(t, proxy, engineCfg, true)
}

func newEngineThroughWith(t *testing.T, proxy *testdb.Proxy, engineCfg Config, watched bool) *Engine {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testDSN)
	if err != nil {
		t.Fatal(err)
	}
	host, port, err := net.SplitHostPort(proxy.Addr())
	if err != nil {
		t.Fatal(err)
	}
	portNumber, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Fallbacks = host, uint16(portNumber), nil
	if watched {
		engineCfg.PoolWatch = ConfigurePool(cfg)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := New(pool, engineCfg)
	t.Cleanup(func() { e.Close(); pool.Close() })
	return e
}

// newTestProxy is a proxy to the test database's server.
func newTestProxy(t *testing.T) *testdb.Proxy {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testDSN)
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(cfg.ConnConfig.Host, "/") {
		t.Skip("the test database is reached through a Unix socket; the proxy forwards TCP")
	}
	return testdb.NewProxy(t, net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))))
}

// A wake test parks a pop on an engine whose re-checks are spaced past the
// pop's timeout (rateWithoutRechecks), so only a wake can deliver a message
// pushed meanwhile before wakeBound: a wake takes milliseconds, hundreds on a
// loaded machine, and without one the pop hears of the push only at its
// timeout, wakePopTimeout. Before, the bound was 400 ms against a re-check
// 700 ms away, and a busy machine delivered notifications in 460-570 ms.
const (
	wakeBound      = 5 * time.Second
	wakePopTimeout = 30 * time.Second
)

// wakeParkedPop parks a pop of q on a (an engine without re-checks), pushes
// to q through pusher once the pop waits idle, and fails t unless the pop
// gets the message within wakeBound. It returns the pop's answer.
func wakeParkedPop(t *testing.T, a, pusher *Engine, q string) *PopResult {
	t.Helper()
	done := parkIdle(t, a, PopRequest{Queue: q, Wait: true, Timeout: wakePopTimeout})
	pushed := time.Now()
	bound := time.After(wakeBound)
	// A partition of its own: an earlier call's lease holds its partition.
	partition := fmt.Sprint("p-", pushed.UnixNano())
	mustPush(t, pusher, items(q, partition, "wake-"+partition)...)
	select {
	case p := <-done:
		if p.err != nil || p.res == nil || len(p.res.Messages) != 1 {
			t.Fatalf("parked pop returned %+v %v", p.res, p.err)
		}
		t.Logf("push→delivery latency of the parked pop: %v", p.at.Sub(pushed))
		return p.res
	case <-bound:
		t.Fatalf("the parked pop did not get a message pushed %v ago: no wake reached it (its re-checks are %v apart)", wakeBound, time.Duration(float64(time.Second)/rateWithoutRechecks))
		return nil
	}
}

// waitIdleParked waits until n pops of q, the one answering on done among
// them, wait idle on e for a push to q (parked, their first claim over): a
// push before then is found by that claim, and a test of wakes would pass
// without one.
func waitIdleParked(t *testing.T, e *Engine, q string, n int, done <-chan poppedAt) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); idleParked(e, q) < n; time.Sleep(5 * time.Millisecond) {
		select {
		case p := <-done:
			t.Fatalf("the pop returned instead of parking: %+v %v", p.res, p.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the pop did not park within 10 s")
		}
	}
}

// idleParked counts the pops of q parked on e with no claim of their own running.
func idleParked(e *Engine, q string) int {
	e.waiters.mu.Lock()
	defer e.waiters.mu.Unlock()
	n := 0
	if l := e.waiters.byQueue[q]; l != nil {
		for el := l.Front(); el != nil; el = el.Next() {
			if el.Value.(*waiter).idle != nil {
				n++
			}
		}
	}
	return n
}

// A database host that dies without closing the listener's connection (power
// loss, a network partition, a failover behind the same address) sends
// nothing more on it, and TCP keepalive gives up on it minutes later (never,
// while a proxy in between keeps its side open, as here): the broker notices within its listener
// check instead, forgets its cached pop plans (the restarted or promoted
// server may have lost acks they were computed from) and gets back on LISTEN,
// so pushes through other brokers wake its parked pops again.
func TestASilentlyDeadListenerConnectionIsReplacedWithinItsCheck(t *testing.T) {
	// Noticed within two checks and the first reconnect delay, well within 3 s.
	const check = 200 * time.Millisecond
	proxy := newTestProxy(t)
	a := newEngineThrough(t, proxy, Config{ListenerCheckInterval: check, ParkedRecheckRate: rateWithoutRechecks})
	b := newEngine(t)
	q := queueName(t)
	mustPop(t, a, PopRequest{Queue: q}) // creates the queue
	waitListening(t, a)
	generation := a.popPlans.currentGeneration()
	killed := time.Now()
	// Every connection that sent LISTEN dies, the live one and any the
	// listener gave up on after a late ping on a loaded machine (still open
	// here): the listener is back on a new one once more have sent LISTEN.
	killedConns := proxy.Kill(listenQuery)
	if killedConns == 0 {
		t.Fatal("no listener connection to kill")
	}
	for deadline := killed.Add(3 * time.Second); proxy.Sent(listenQuery) <= killedConns; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the listener did not notice its dead connection within 3 s")
		}
	}
	t.Logf("back on LISTEN %v after its connection died (check interval %v)", time.Since(killed).Round(time.Millisecond), check)
	if a.popPlans.currentGeneration() == generation {
		t.Fatal("the listener replaced its dead connection and the cached pop plans were kept")
	}
	waitListening(t, a)
	wakeParkedPop(t, a, b, q)
}

// A listener that hears nothing for many check intervals keeps its connection
// (each wait cut short by its deadline, each ping answered), and the broker its
// cached pop plans; notifications still reach it after all those waits.
func TestAQuietListenerKeepsItsConnectionAndPlans(t *testing.T) {
	proxy := newTestProxy(t)
	const check = 200 * time.Millisecond
	a := newEngineThrough(t, proxy, Config{ListenerCheckInterval: check, ParkedRecheckRate: rateWithoutRechecks})
	b := newEngine(t)
	q := queueName(t)
	mustPop(t, a, PopRequest{Queue: q})
	waitListening(t, a)
	generation := a.popPlans.currentGeneration()
	time.Sleep(10 * check) // some ten waits cut short and pings
	if n := proxy.Sent(listenQuery); n != 1 {
		t.Fatalf("the listener connected %d times while its connection was alive, want once", n)
	}
	if a.popPlans.currentGeneration() != generation {
		t.Fatal("the broker forgot its cached pop plans while its listener's connection was alive")
	}
	wakeParkedPop(t, a, b, q)
}

// A database too busy to answer the listener's ping within the check
// interval (overloaded for seconds) is not a dead one: the listener keeps its
// connection, and the broker its cached pop plans, as long as pings come back
// within their own deadline, twice the interval. Before, each such ping
// counted as a lost connection, and every check reconnected and sent every
// parked pop to re-check on the busy database.
func TestAListenerWhosePingsAnswerLateKeepsItsConnection(t *testing.T) {
	const check = 300 * time.Millisecond
	proxy := newTestProxy(t)
	a := newEngineThrough(t, proxy, Config{ListenerCheckInterval: check})
	waitListening(t, a)
	generation := a.popPlans.currentGeneration()
	proxy.Slow(listenQuery, 4*check/3)
	time.Sleep(12 * check)
	if n := proxy.Sent(listenQuery); n != 1 {
		t.Fatalf("the listener connected %d times while its pings took 4/3 of a check, want once", n)
	}
	if a.popPlans.currentGeneration() != generation {
		t.Fatal("the broker forgot its cached pop plans while its database answered late")
	}
}

// Pings that miss even their own deadline (a database overloaded longer)
// count as a lost connection, but each one in a row doubles the next ping's
// deadline: the reconnects (each forgetting the plans and waking every parked
// pop) stop once the deadline outgrows the delay, instead of coming back at
// every check for as long as the overload lasts. With the pool configured as
// the broker's (watched), the listener's setup reads the server's start time
// after LISTEN, one more late answer: each step of the setup has the ping's
// deadline, not the whole setup, or the setup never fits (before, 5
// connections and one more every few seconds).
func TestAListenerBacksOffWhileItsPingsMissTheirDeadline(t *testing.T) {
	for _, watched := range []bool{false, true} {
		t.Run(fmt.Sprint("watched=", watched), func(t *testing.T) {
			listenerBacksOffWhileItsPingsMissTheirDeadline(t, watched)
		})
	}
}

func listenerBacksOffWhileItsPingsMissTheirDeadline(t *testing.T, watched bool) {
	const check = 100 * time.Millisecond
	const delay = 5 * check // past the first two deadlines (2 and 4 checks), within the third
	proxy := newTestProxy(t)
	a := newEngineThroughWith(t, proxy, Config{ListenerCheckInterval: check}, watched)
	waitListening(t, a)
	proxy.Slow(listenQuery, delay)
	// Two deadlines missed and a third connection's LISTEN answered: at most
	// 2 × (delay + check + 6 checks + the reconnect delay) ≈ 2.6 s.
	time.Sleep(40 * check)
	settled := proxy.Sent(listenQuery)
	generation := a.popPlans.currentGeneration()
	time.Sleep(30 * check)
	if n := proxy.Sent(listenQuery) - settled; n != 0 {
		t.Fatalf("the listener reconnected %d more times in %v while every answer took %v (%d connections before)", n, 30*check, delay, settled)
	}
	if a.popPlans.currentGeneration() != generation {
		t.Fatal("the broker kept forgetting its cached pop plans while its database answered late")
	}
	t.Logf("%d listener connections before the pings' deadline outgrew the %v delay", settled, delay)
}

// When the database host falls silent (and a live server answers new
// connections: a failover behind the same address, or the host back), the
// pool's idle connections are as dead as the listener's, and a request given
// one waits out its whole database deadline. Once the listener notices, the
// pool closes its idle connections, so only the requests already on a dead
// one wait their deadline; before, each idle connection cost one request its
// deadline in turn (here 3 × 2 s; with the default 30 s deadline and a
// pool of 20, minutes).
func TestRequestsGetLiveConnectionsOnceTheListenerNoticesASilentHost(t *testing.T) {
	const check = 200 * time.Millisecond
	const requestDeadline = 2 * time.Second
	const idle = 3 // of the pool's 4
	proxy := newTestProxy(t)
	// A pop's claim has its own deadline, not its request's.
	a := newEngineThrough(t, proxy, Config{ListenerCheckInterval: check, ClaimTimeout: requestDeadline})
	t.Cleanup(proxy.Close) // before the pool's close, which would wait on the dead connections
	q := queueName(t)
	mustPop(t, a, PopRequest{Queue: q})
	waitListening(t, a)
	conns := make([]*pgxpool.Conn, idle)
	for i := range conns {
		c, err := a.pool.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
	}
	for _, c := range conns {
		c.Release()
	}
	silent := time.Now()
	if n := proxy.Kill(""); n < idle+1 {
		t.Fatalf("made %d connections silent, want the listener's and %d idle ones", n, idle)
	}
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), requestDeadline)
		_, err := a.Pop(ctx, PopRequest{Queue: q})
		cancel()
		if err == nil {
			took := time.Since(silent)
			t.Logf("first pop answered %v after the host fell silent (attempt %d; check %v, request deadline %v)", took.Round(time.Millisecond), attempt, check, requestDeadline)
			if took > requestDeadline+time.Second {
				t.Fatalf("the first pop to succeed came %v after the host fell silent, on attempt %d: requests kept getting dead idle connections", took, attempt)
			}
			return
		}
		if time.Since(silent) > (idle+2)*requestDeadline {
			t.Fatalf("no pop succeeded within %v of the host falling silent: %v", (idle+2)*requestDeadline, err)
		}
	}
}

// The reconnect backoff after a connection lost to an unanswered ping grows
// while such losses follow one another (a database overloaded for longer),
// but a connection whose pings came back in time was healthy: losing it
// starts the backoff over. Before, only a connection the server closed did,
// so after a few silent losses in a row the listener waited seconds (up to
// 5 s) to reconnect at every later one, days of healthy connection between
// them or not, its parked pops left to their re-checks meanwhile.
func TestAListenerLosingAHealthyConnectionSilentlyReconnectsAtOnce(t *testing.T) {
	const check = 50 * time.Millisecond
	proxy := newTestProxy(t)
	a := newEngineThrough(t, proxy, Config{ListenerCheckInterval: check})
	t.Cleanup(proxy.Close) // before the pool's close, which would wait on the dead connections
	// waitConnections waits for the listener's nth connection to be on LISTEN.
	waitConnections := func(n int, within time.Duration) {
		t.Helper()
		for deadline := time.Now().Add(within); proxy.Sent(listenQuery) < n || !a.listening.Load(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the listener had %d connections after %v, want %d", proxy.Sent(listenQuery), within, n)
			}
		}
	}
	// Four connections in a row go silent before a ping answers: the backoff grows to 1.6 s.
	const silentInARow = 4
	for i := 1; i <= silentInARow; i++ {
		waitConnections(i, 10*time.Second)
		proxy.Kill(listenQuery)
	}
	waitConnections(silentInARow+1, 10*time.Second)
	time.Sleep(10 * check) // pings answered in time: a healthy connection
	lost := time.Now()
	proxy.Kill(listenQuery)
	waitConnections(silentInARow+2, 10*time.Second)
	took := time.Since(lost)
	t.Logf("the listener reconnected %v after its healthy connection fell silent (check %v)", took.Round(time.Millisecond), check)
	// A check, a ping's first deadline (two checks), the first backoff (100 ms) and a connect.
	if took > time.Second {
		t.Fatalf("the listener took %v to reconnect after its healthy connection fell silent: the backoff from the silent losses before was kept", took)
	}
}

// A host that falls silent while the listener sets up its connection (its
// LISTEN sent, no answer) held the listener there until TCP gave up, minutes
// on an open connection: no ping runs before LISTEN is answered, so nothing
// noticed, and pushes through other brokers woke none of this broker's
// parked pops. The setup now has the ping's deadline, and a setup past it
// counts as a silent connection.
func TestAListenerWhoseLISTENGoesUnansweredReconnects(t *testing.T) {
	const check = 50 * time.Millisecond
	proxy := newTestProxy(t)
	a := newEngineThrough(t, proxy, Config{ListenerCheckInterval: check})
	t.Cleanup(proxy.Close) // before the pool's close, which would wait on the dead connections
	waitListening(t, a)
	// From now on nothing the server says reaches a listener's connection
	// within the test: the current one's ping goes unanswered, and so does
	// the next one's LISTEN.
	proxy.Slow(listenQuery, time.Minute)
	for deadline := time.Now().Add(5 * time.Second); proxy.Sent(listenQuery) < 3; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the listener made %d connections in 5 s, want a third once its second's LISTEN went unanswered", proxy.Sent(listenQuery))
		}
	}
}

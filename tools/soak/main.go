// Command lanes-soak is the fault soak (docs/operations.md, "Fault soak"): a mixed load through
// the Go SDK against two brokers on one PostgreSQL while brokers are SIGKILLed and restarted,
// PostgreSQL is crashed or restarted and client connections are dropped at random moments.
// Once the faults stop and the consumers drain, it checks that every push the broker
// acknowledged (queued, duplicate or buffered) reached every group, first deliveries kept each
// partition's order, and nothing arrived that was never pushed; it counts and explains
// duplicates. It exits 1 on a loss, an order violation or a phantom delivery, and when the
// consumers did not drain in time (the messages the broker still holds are reported as not
// drained, apart from the lost ones).
//
//	make soak SOAK_DURATION=5m SOAK_SEED=7 SOAK_FLAGS='-pg-port 55001 -broker-ports 7001,7002 -proxy-ports 7003,7004'
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	lanes "github.com/lanesmq/lanes/sdk-go"
)

type config struct {
	duration       time.Duration
	seed           uint64
	faultEvery     time.Duration
	faultTail      time.Duration
	drain          time.Duration
	lease          int
	pgPort         int
	pgDir          string
	brokerPorts    []int
	proxyPorts     []int
	bin            string
	walWriterDelay string
	runDir         string
	brokerEnv      []string
}

func main() {
	cfg := config{}
	var brokerPorts, proxyPorts, brokerEnv string
	flag.DurationVar(&cfg.duration, "duration", 5*time.Minute, "how long the load and the faults run")
	flag.Uint64Var(&cfg.seed, "seed", 0, "random seed of the load and the fault times (0: from the clock); the report prints it")
	flag.DurationVar(&cfg.faultEvery, "fault-every", 6*time.Second, "mean time between faults (exponential)")
	flag.DurationVar(&cfg.faultTail, "fault-tail", 20*time.Second, "how long faults go on once the producers stop (consumers drain through them, with no new writes to wake a partition); from 5s on, the first is a PostgreSQL crash once the consumers caught up")
	flag.DurationVar(&cfg.drain, "drain", 3*time.Minute, "how long the consumers may take to drain once the faults stop")
	flag.IntVar(&cfg.lease, "lease-seconds", 5, "the consume loops' lease")
	flag.IntVar(&cfg.pgPort, "pg-port", 54349, "the soak's own PostgreSQL port (scripts/pg.sh, durable)")
	flag.StringVar(&cfg.pgDir, "pg-dir", "/tmp/lanes-soak-pg", "the soak's PostgreSQL directory")
	flag.StringVar(&brokerPorts, "broker-ports", "6642,6643", "the two brokers' ports")
	flag.StringVar(&proxyPorts, "proxy-ports", "6644,6645", "the ports of the proxies in front of them (the clients' URLs)")
	flag.StringVar(&cfg.walWriterDelay, "wal-writer-delay", "1s", "PostgreSQL's wal_writer_delay in the soak's cluster (its default is 200ms): how long an ack may wait for the flush, and so what a crash can undo")
	flag.StringVar(&cfg.bin, "bin", "bin/lanes", "the broker binary (make build)")
	flag.StringVar(&cfg.runDir, "dir", "", "where logs, spools and the report go (default /tmp/lanes-soak-<seed>)")
	flag.StringVar(&brokerEnv, "broker-env", "", "further broker settings, space-separated KEY=value")
	flag.Parse()
	if cfg.seed == 0 {
		cfg.seed = uint64(time.Now().UnixNano() % 1_000_000)
	}
	var err error
	if cfg.brokerPorts, err = ports(brokerPorts); err == nil {
		cfg.proxyPorts, err = ports(proxyPorts)
	}
	if err == nil && len(cfg.brokerPorts) != len(cfg.proxyPorts) {
		err = errors.New("-broker-ports and -proxy-ports must name as many ports")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "lanes-soak:", err)
		os.Exit(2)
	}
	cfg.brokerEnv = strings.Fields(brokerEnv)
	if cfg.runDir == "" {
		cfg.runDir = fmt.Sprintf("/tmp/lanes-soak-%d", cfg.seed)
	}
	if cfg.bin, err = filepath.Abs(cfg.bin); err == nil {
		err = run(cfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "lanes-soak:", err)
		os.Exit(1)
	}
}

func ports(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		p, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("bad port %q", f)
		}
		out = append(out, p)
	}
	return out, nil
}

func run(cfg config) error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	if err := os.RemoveAll(cfg.runDir); err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.runDir, 0o755); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Printf("lanes-soak: seed %d, %v of load and faults (one every %v on average), run directory %s\n",
		cfg.seed, cfg.duration, cfg.faultEvery, cfg.runDir)
	c, err := startCluster(ctx, root, cfg)
	if err != nil {
		return err
	}
	defer c.stop()
	faultLog, err := os.Create(filepath.Join(cfg.runDir, "faults.log"))
	if err != nil {
		return err
	}
	defer faultLog.Close()

	led := newLedger()
	var urls []string
	for _, p := range c.proxies {
		urls = append(urls, p.url())
	}

	// Consumers first, so the groups exist before the first push (and read from the start anyway).
	var loops []*consumeLoop
	consumeCtx, stopConsumers := context.WithCancel(context.Background())
	defer stopConsumers()
	for _, queue := range soakQueues {
		for _, g := range soakGroups {
			for i := range 2 {
				w := &warnLog{counts: map[string]int{}}
				// Each loop prefers one broker and moves to the other when it fails.
				order := append(append([]string{}, urls[i%len(urls):]...), urls[:i%len(urls)]...)
				client, err := lanes.New(lanes.WithURL(order...), lanes.WithLogger(slog.New(w)), lanes.WithTimeout(10*time.Second))
				if err != nil {
					return err
				}
				cl := &consumeLoop{id: len(loops), queue: queue, group: g, client: client, warns: w}
				if err := cl.start(consumeCtx, led, cfg.lease); err != nil {
					return err
				}
				loops = append(loops, cl)
			}
		}
	}

	// Producers: each partition has one, pinned to one broker, so its push order is the order
	// the broker must keep (docs/operations.md, "Order across brokers").
	loadCtx, stopLoad := context.WithTimeout(ctx, cfg.duration)
	defer stopLoad()
	var producers sync.WaitGroup
	pinned := make([]*lanes.Client, len(urls))
	for i, u := range urls {
		if pinned[i], err = lanes.New(lanes.WithURL(u), lanes.WithTimeout(10*time.Second)); err != nil {
			return err
		}
	}
	lane := 0
	lull := &lullGate{}
	newProducer := func(retry bool) *producer {
		lane++
		return &producer{name: fmt.Sprint(lane), client: pinned[lane%len(pinned)], led: led,
			rng: rand.New(rand.NewPCG(cfg.seed, uint64(lane)+1)), retry: retry, quiet: lane%3 == 0, lull: lull, seq: map[string]int{}}
	}
	fixed := func(name string) func() string { return func() string { return name } }
	for i := range 4 {
		p := newProducer(true)
		producers.Go(func() { p.runPushes(loadCtx, queueSingle, fixed(fmt.Sprintf("s%d", i)), func() int { return 1 }) })
	}
	for i := range 2 {
		p := newProducer(false)
		producers.Go(func() { p.runPushes(loadCtx, queueSingle, fixed(fmt.Sprintf("n%d", i)), func() int { return 1 }) })
	}
	for i := range 4 {
		p := newProducer(true)
		producers.Go(func() {
			p.runPushes(loadCtx, queueBatch, fixed(fmt.Sprintf("b%d", i)), func() int { return 2 + p.rng.IntN(29) })
		})
	}
	for i := range 2 {
		p := newProducer(true)
		burst := 0
		producers.Go(func() {
			p.runPushes(loadCtx, queueBurst, func() string { burst++; return fmt.Sprintf("r%d-%d", i, burst) }, func() int { return 1 + p.rng.IntN(10) })
		})
	}
	for i := range 2 {
		p := newProducer(true)
		producers.Go(func() { p.runBundles(loadCtx, [2]string{fmt.Sprintf("t%d", 2*i), fmt.Sprintf("t%d", 2*i+1)}) })
	}

	faultCtx, stopFaults := context.WithTimeout(ctx, cfg.duration+cfg.faultTail)
	defer stopFaults()
	inj := &injector{c: c, lull: lull, rng: rand.New(rand.NewPCG(cfg.seed, 0)), every: cfg.faultEvery, log: faultLog, busy: map[string]bool{}}
	injDone := make(chan struct{})
	go func() { inj.run(faultCtx); close(injDone) }()
	go progress(faultCtx, led, inj, cfg.duration)

	<-loadCtx.Done()
	producers.Wait()
	if cfg.faultTail >= 5*time.Second { // the injector still runs (and waits for it)
		inj.crashAsTheLoadEnds(faultCtx, led.caughtUp)
	}
	fmt.Printf("lanes-soak: producers stopped; faults go on for %v\n", cfg.faultTail)
	<-injDone // every fault has recovered: both brokers and PostgreSQL answer
	loadEnded := time.Now()
	if ctx.Err() != nil {
		return errors.New("interrupted")
	}
	fmt.Printf("lanes-soak: load and faults stopped; draining (up to %v)\n", cfg.drain)

	admin, err := lanes.New(lanes.WithURL(urls...))
	if err != nil {
		return err
	}
	drained := waitDrained(ctx, admin, led, cfg.drain)
	// A redelivery after a lost ack comes a lease later: give them time to show.
	time.Sleep(time.Duration(cfg.lease+1) * time.Second)
	stopCtx, cancelStop := context.WithTimeout(context.Background(), 30*time.Second)
	var loopErrs []string
	for _, cl := range loops {
		if err := cl.loop.Stop(stopCtx); err != nil {
			loopErrs = append(loopErrs, fmt.Sprintf("loop %d (%s %s) stop: %v", cl.id, cl.queue, cl.group.label, err))
		}
		if err := cl.loop.Err(); err != nil {
			loopErrs = append(loopErrs, fmt.Sprintf("loop %d (%s %s) ended: %v", cl.id, cl.queue, cl.group.label, err))
		}
	}
	cancelStop()

	// With the loops stopped, what the broker still holds tells a backlog from a loss.
	var held backlog
	var heldErr error
	if !drained {
		held, heldErr = pendingAtBroker(ctx, admin)
	}
	rep := check(led, loops, inj, drained, held)
	rep.Seed, rep.Duration, rep.DrainTime = cfg.seed, cfg.duration.String(), time.Since(loadEnded).Round(time.Millisecond).String()
	rep.DrainLimit, rep.LoopErrors = cfg.drain.String(), loopErrs
	if heldErr != nil {
		rep.BacklogError = heldErr.Error()
	}
	inj.mu.Lock()
	rep.FaultFailures = inj.failed
	inj.mu.Unlock()
	if err := rep.write(cfg.runDir, led); err != nil {
		return err
	}
	rep.print(os.Stdout)
	if !rep.ok() {
		return fmt.Errorf("FAILED: %s (details in %s)", rep.verdict(), cfg.runDir)
	}
	fmt.Println("lanes-soak: PASSED")
	return nil
}

// waitDrained waits until every group has handled every acknowledged message of every queue and
// holds nothing pending.
func waitDrained(ctx context.Context, admin *lanes.Client, led *ledger, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if led.caughtUp() && nothingPending(ctx, admin) {
			return true
		}
		time.Sleep(500 * time.Millisecond)
	}
	return false
}

func nothingPending(ctx context.Context, admin *lanes.Client) bool {
	for _, queue := range soakQueues {
		for _, g := range soakGroups {
			d, err := admin.Queue(queue).Group(g.group).Depth(ctx)
			if err != nil || d.Pending != 0 {
				return false
			}
		}
	}
	return true
}

// pendingAtBroker asks the broker, for every group of every queue, how many messages of each
// partition the group has not committed.
func pendingAtBroker(ctx context.Context, admin *lanes.Client) (backlog, error) {
	held := backlog{}
	for _, g := range soakGroups {
		held[g.label] = map[string]int{}
		for _, queue := range soakQueues {
			d, err := admin.Queue(queue).Group(g.group).Depth(ctx)
			if err != nil {
				return held, fmt.Errorf("depth of %s for %s: %w", queue, g.label, err)
			}
			for _, p := range d.Partitions {
				held[g.label][queue+"/"+p.Partition] = p.Pending
			}
		}
	}
	return held, nil
}

func progress(ctx context.Context, led *ledger, inj *injector, total time.Duration) {
	start := time.Now()
	t := time.NewTicker(30 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		led.mu.Lock()
		acked := 0
		for _, r := range led.pushes {
			if r.Status != "" {
				acked++
			}
		}
		pushed, delivered := len(led.pushes), len(led.deliveries)
		led.mu.Unlock()
		fmt.Printf("lanes-soak: %v/%v pushed %d, acknowledged %d, deliveries %d, faults %v\n",
			time.Since(start).Round(time.Second), total, pushed, acked, delivered, inj.counts())
	}
}

// repoRoot is the directory holding go.work and scripts/pg.sh, from the working directory up.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "scripts", "pg.sh")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("repository root (scripts/pg.sh) not found above the working directory")
		}
		dir = parent
	}
}

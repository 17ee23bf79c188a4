package lanes_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	lanes "github.com/lanesmq/lanes/sdk-go"
)

// faultBroker is a broker and a PostgreSQL cluster of the test's own (scripts/fault-broker.sh):
// the shared test broker and cluster serve other tests meanwhile, so they cannot be killed.
type faultBroker struct {
	url string
	env []string
}

func startFaultBroker(t *testing.T) *faultBroker {
	t.Helper()
	port, pgPort := freeTCPPort(t), freeTCPPort(t)
	fb := &faultBroker{
		url: fmt.Sprintf("http://127.0.0.1:%d", port),
		env: append(os.Environ(),
			fmt.Sprintf("LANES_FAULT_DIR=/tmp/lanes-fault-go-%d-%d", port, os.Getpid()),
			fmt.Sprintf("LANES_FAULT_PORT=%d", port),
			fmt.Sprintf("LANES_FAULT_PG_PORT=%d", pgPort)),
	}
	t.Cleanup(func() { _ = fb.run("stop") })
	require.NoError(t, fb.run("start"))
	return fb
}

func (fb *faultBroker) run(action string) error {
	cmd := exec.Command("bash", filepath.Join("..", "scripts", "fault-broker.sh"), action)
	cmd.Env = fb.env
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("fault-broker.sh %s: %w: %s", action, err, out)
	}
	return nil
}

func freeTCPPort(t *testing.T) int {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port
}

// loopWarnings keeps the consume loop's warnings (one per pop, ack or renew failure, with its
// op) and when each came, to tell a redelivery after a failed ack from one after a good ack.
type loopWarnings struct {
	mu   sync.Mutex
	ops  []string
	errs []string
	at   []time.Time
}

func (w *loopWarnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *loopWarnings) WithAttrs([]slog.Attr) slog.Handler           { return w }
func (w *loopWarnings) WithGroup(string) slog.Handler                { return w }
func (w *loopWarnings) Handle(_ context.Context, r slog.Record) error {
	op, msg := "", r.Message
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "op":
			op = a.Value.String()
		case "err":
			msg += ": " + a.Value.String()
		}
		return true
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ops, w.errs, w.at = append(w.ops, op), append(w.errs, msg), append(w.at, time.Now())
	return nil
}

// count is how many failures of op were logged.
func (w *loopWarnings) count(op string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, o := range w.ops {
		if o == op {
			n++
		}
	}
	return n
}

// ackFailedBetween reports whether an ack failure was logged in [from, to].
func (w *loopWarnings) ackFailedBetween(from, to time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, op := range w.ops {
		if op == "ack" && !w.at[i].Before(from) && !w.at[i].After(to) {
			return true
		}
	}
	return false
}

// deliveries records each handling of each transaction id, and the order of first handlings
// in each partition.
type deliveries struct {
	mu    sync.Mutex
	at    map[string][]time.Time
	order map[string][]string
}

func (d *deliveries) add(m *lanes.Message) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.at[m.TransactionID]) == 0 {
		d.order[m.PartitionID] = append(d.order[m.PartitionID], m.TransactionID)
	}
	d.at[m.TransactionID] = append(d.at[m.TransactionID], time.Now())
}

// outOfOrder lists, per partition, the first handlings that came before an older message's:
// the producers push one item at a time, so their ids ascend in push order.
func (d *deliveries) outOfOrder() []string {
	var out []string
	for _, txns := range d.order {
		for i := 1; i < len(txns); i++ {
			if txns[i] < txns[i-1] {
				out = append(out, txns[i-1]+" before "+txns[i])
			}
		}
	}
	return out
}

// stored is what the producers were told is stored, by transaction id.
type stored struct {
	mu     sync.Mutex
	status map[string]string
}

func (s *stored) set(txn, status string) {
	s.mu.Lock()
	s.status[txn] = status
	s.mu.Unlock()
}

// count is how many were told status, or how many in all with "".
func (s *stored) count(status string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, st := range s.status {
		if status == "" || st == status {
			n++
		}
	}
	return n
}

// A producer (plain pushes with fixed transaction ids, and the push buffer), the consume loop
// of docs/consuming.md and the Messages iterator (in a group of its own, so it reads the same
// messages) run through a broker SIGKILL, the broker's restart on the same port a second later,
// and a PostgreSQL restart, in one process nobody restarts. For the loop and the iterator alike,
// every push the SDK answered stored is handled, nothing is handled that was never pushed, a
// message handled again had an ack failure reported in between, and neither ends on its own.
func TestITConsumerAndProducerRideThroughBrokerKillAndPostgresRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a broker and restarts a PostgreSQL cluster of its own")
	}
	fb := startFaultBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const queue, plainN, bufferedN, partitions = "sdkfaults-go", 300, 150, 4

	producer, err := lanes.New(lanes.WithURL(fb.url))
	require.NoError(t, err)
	closeWhenDone(t, producer)
	warnings := &loopWarnings{}
	consumerClient, err := lanes.New(lanes.WithURL(fb.url), lanes.WithLogger(slog.New(warnings)))
	require.NoError(t, err)
	closeWhenDone(t, consumerClient)

	got := &deliveries{at: map[string][]time.Time{}, order: map[string][]string{}}
	consumer, err := consumerClient.Queue(queue).Concurrency(2).LeaseSeconds(10).
		Consume(ctx, func(_ context.Context, m *lanes.Message) error {
			got.add(m)
			time.Sleep(5 * time.Millisecond) // some work, so a backlog builds and pops carry batches
			return nil
		})
	require.NoError(t, err)

	// The pull iterator reads the same messages through a group of its own, on a client of its
	// own so its warnings are told apart from the loop's.
	iterWarnings := &loopWarnings{}
	iterClient, err := lanes.New(lanes.WithURL(fb.url), lanes.WithLogger(slog.New(iterWarnings)))
	require.NoError(t, err)
	closeWhenDone(t, iterClient)
	iterView := iterClient.Queue(queue).Group("iter").SubscriptionMode("all")
	iterGot := &deliveries{at: map[string][]time.Time{}, order: map[string][]string{}}
	iterCtx, iterStop := context.WithCancel(ctx)
	defer iterStop()
	iterDone := make(chan error, 1) // the iterator's end: the error it yielded, if any
	go func() {
		for m, err := range iterView.LeaseSeconds(10).Messages(iterCtx) {
			if err != nil {
				iterDone <- err
				return
			}
			iterGot.add(m)
			time.Sleep(5 * time.Millisecond)
		}
		iterDone <- nil
	}()
	iterEnded := func() bool { return len(iterDone) > 0 }

	told := &stored{status: map[string]string{}}
	var errMu sync.Mutex // guards the two below
	var pushErrs []string
	var bufErrs []error
	failures := func() (push, flush int) {
		errMu.Lock()
		defer errMu.Unlock()
		return len(pushErrs), len(bufErrs)
	}
	pushed := make(chan int, plainN)
	// The buffered producer goes at the plain one's pace, an item per push call (answered or
	// failed): on a slow machine it would otherwise be done before the broker goes down, and no
	// buffer flush would fail. It needs bufferedN turns in all; more are dropped.
	bufferTurns := make(chan struct{}, bufferedN)
	var producers sync.WaitGroup
	producers.Add(2)
	go func() { // plain pushes: an application resends an item the SDK did not report stored
		defer producers.Done()
		for i := range plainN {
			txn := fmt.Sprintf("go-%03d", i)
			q := producer.Queue(queue).Partition(fmt.Sprintf("p%d", i%partitions))
			for ctx.Err() == nil {
				select {
				case bufferTurns <- struct{}{}:
				default:
				}
				res, err := q.Push(ctx, lanes.Item{Data: map[string]int{"i": i}, TransactionID: txn})
				if err == nil && res[0].Status != lanes.StatusFailed {
					told.set(txn, res[0].Status)
					break
				}
				errMu.Lock()
				pushErrs = append(pushErrs, fmt.Sprint(err, res))
				errMu.Unlock()
				time.Sleep(50 * time.Millisecond)
			}
			pushed <- i
			time.Sleep(5 * time.Millisecond)
		}
	}()
	buf := producer.Queue(queue).Partition("buffered").Buffer(lanes.BufferOptions{
		MessageCount: 10, FlushInterval: 20 * time.Millisecond,
		OnError: func(err error) { errMu.Lock(); bufErrs = append(bufErrs, err); errMu.Unlock() },
	})
	go func() {
		defer producers.Done()
		for i := range bufferedN {
			select {
			case <-bufferTurns:
			case <-ctx.Done():
				return
			}
			txn := fmt.Sprintf("go-buf-%03d", i)
			if err := buf.Push(ctx, lanes.Item{Data: map[string]int{"i": i}, TransactionID: txn}); err != nil {
				errMu.Lock()
				bufErrs = append(bufErrs, err)
				errMu.Unlock()
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()

	waitPushed := func(n int) {
		for i := range pushed {
			if i >= n-1 {
				return
			}
		}
	}
	waitPushed(plainN / 3)
	require.NoError(t, fb.run("kill"))
	time.Sleep(time.Second)
	// Down until both loops met the outage past the SDK's own retries, so their recovery runs: a
	// worker resending a failed ack pops nothing meanwhile, so its failed ack counts as a pop's.
	require.Eventually(t, func() bool {
		push, flush := failures()
		return warnings.count("pop")+warnings.count("ack") > 0 && push > 0 && flush > 0 &&
			iterWarnings.count("pop")+iterWarnings.count("ack") > 0
	}, 15*time.Second, 20*time.Millisecond, "a failed pop or ack (loop and iterator), push and buffer flush reported while the broker is down")
	require.NoError(t, fb.run("start"))
	waitPushed(2 * plainN / 3)
	buffered := told.count(lanes.StatusBuffered)
	require.NoError(t, fb.run("stop-pg"))
	require.Eventually(t, func() bool { return told.count(lanes.StatusBuffered) > buffered },
		15*time.Second, 20*time.Millisecond, "a push answered buffered while PostgreSQL is down")
	require.NoError(t, fb.run("start-pg"))
	producers.Wait()

	// The buffer holds what it could not send yet; Close sends it (or says it could not).
	closeCtx, closeCancel := context.WithTimeout(ctx, 20*time.Second)
	require.NoError(t, producer.Close(closeCtx), "the push buffer did not flush after the faults")
	closeCancel()
	for i := range bufferedN {
		told.set(fmt.Sprintf("go-buf-%03d", i), "in the push buffer")
	}
	want := told.count("")
	producerView := consumerClient.Queue(queue)
	require.Equal(t, plainN+bufferedN, want)

	// Done when every stored message was handled and the broker holds nothing uncommitted: a
	// message whose ack failed has then come back after its lease and been acked.
	settled := func(got *deliveries, view lanes.QueueBuilder) bool {
		got.mu.Lock()
		all := allDelivered(got.at, told.status)
		got.mu.Unlock()
		if !all {
			return false
		}
		depth, err := view.Depth(ctx)
		return err == nil && depth.Pending == 0
	}
	for start := time.Now(); !settled(got, producerView) || !settled(iterGot, iterView); time.Sleep(50 * time.Millisecond) {
		if time.Since(start) > 25*time.Second || isDone(consumer) || iterEnded() {
			break
		}
	}
	if isDone(consumer) {
		t.Fatalf("the consume loop ended on its own: %v", consumer.Err())
	}
	if iterEnded() {
		t.Fatalf("the iterator ended on its own: %v", <-iterDone)
	}
	stopCtx, stopCancel := context.WithTimeout(ctx, 10*time.Second)
	require.NoError(t, consumer.Stop(stopCtx))
	stopCancel()
	require.NoError(t, consumer.Err())
	iterStop()
	require.NoError(t, <-iterDone, "the iterator yielded an error")

	t.Run("consume loop", func(t *testing.T) { checkFaultDeliveries(t, got, warnings, told) })
	t.Run("iterator", func(t *testing.T) { checkFaultDeliveries(t, iterGot, iterWarnings, told) })
	errMu.Lock()
	defer errMu.Unlock()
	t.Logf("push errors %d %q", len(pushErrs), pushErrs)
	for _, err := range bufErrs {
		var dropped *lanes.DroppedError
		require.NotErrorAs(t, err, &dropped, "the buffer dropped items")
	}
}

// checkFaultDeliveries checks one reader's handlings against what the producers were told: every
// stored message handled, once, in push order per partition, and nothing never pushed.
func checkFaultDeliveries(t *testing.T, got *deliveries, warnings *loopWarnings, told *stored) {
	got.mu.Lock()
	defer got.mu.Unlock()
	var missing, unknown, unexplained []string
	redelivered := 0
	for txn := range told.status {
		if len(got.at[txn]) == 0 {
			missing = append(missing, txn)
		}
	}
	for txn, times := range got.at {
		if _, ok := told.status[txn]; !ok {
			unknown = append(unknown, txn)
		}
		for k := 1; k < len(times); k++ {
			redelivered++
			if !warnings.ackFailedBetween(times[k-1], times[k]) {
				unexplained = append(unexplained, txn)
			}
		}
	}
	statuses := map[string]int{}
	for _, s := range told.status {
		statuses[s]++
	}
	warnings.mu.Lock()
	t.Logf("stored %d %v, handled %d distinct, %d redelivered; warnings %d: %q",
		len(told.status), statuses, len(got.at), redelivered, len(warnings.ops), warnings.errs)
	warnings.mu.Unlock()
	require.Empty(t, missing, "stored but never handled")
	require.Empty(t, unknown, "handled but never pushed")
	require.Empty(t, got.outOfOrder(), "a partition's messages handled out of push order")
	require.Empty(t, unexplained, "handled again though no ack failure was reported in between")
	// A failed ack is resent until it lands (the broker is back well inside the 10 s
	// lease), so no message is handled twice; before, each failed ack gave its pop back.
	require.Zero(t, redelivered, "handled twice: a failed ack was not resent until it landed")
}

func isDone(c *lanes.Consumer) bool {
	select {
	case <-c.Done():
		return true
	default:
		return false
	}
}

func allDelivered(got map[string][]time.Time, want map[string]string) bool {
	for txn := range want {
		if len(got[txn]) == 0 {
			return false
		}
	}
	return true
}

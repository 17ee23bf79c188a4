package api

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/lanesmq/lanes/server/internal/engine"
)

func TestWidePopClaimsThreePartitionsUnderOneLease(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	for _, p := range []string{"p1", "p2", "p3"} {
		b.push(t, q, p, p+"-a", p+"-b")
		b.push(t, q, p, p+"-c")
	}
	pop := b.pop(t, "/api/v1/pop/queue/"+q+"?partitions=3&batch=100&leaseSeconds=5")
	if pop.PartitionsClaimed != 3 || len(pop.Messages) != 9 || pop.LeaseID == "" {
		t.Fatalf("wide pop: claimed %d, %v, lease %q", pop.PartitionsClaimed, pop.txns(), pop.LeaseID)
	}
	perPartition := map[string][]string{}
	for _, m := range pop.Messages {
		if m.LeaseID != pop.LeaseID {
			t.Fatalf("message %s under lease %s, pop lease %s", m.TransactionID, m.LeaseID, pop.LeaseID)
		}
		perPartition[m.Partition] = append(perPartition[m.Partition], m.TransactionID)
	}
	for _, p := range []string{"p1", "p2", "p3"} {
		if !sameStrings(perPartition[p], []string{p + "-a", p + "-b", p + "-c"}) {
			t.Fatalf("partition %s order: %v", p, perPartition[p])
		}
	}
	// Every message names its own partition's id (one pop spans three).
	stored := map[string]string{}
	rows, err := b.Pool.Query(context.Background(), `SELECT p.name, p.id::text FROM lanes.partitions p
		JOIN lanes.queues q ON q.id = p.queue_id WHERE q.name = $1`, q)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name, id string
		if err := rows.Scan(&name, &id); err != nil {
			t.Fatal(err)
		}
		stored[name] = id
	}
	rows.Close()
	for _, m := range pop.Messages {
		if m.PartitionID != stored[m.Partition] {
			t.Fatalf("message %s of partition %s names partitionId %s, the partition is %s", m.TransactionID, m.Partition, m.PartitionID, stored[m.Partition])
		}
	}
	// Each claimed partition holds exactly one leased batch: nothing left to claim.
	if again := b.pop(t, "/api/v1/pop/queue/"+q+"?partitions=0"); len(again.Messages) != 0 {
		t.Fatalf("leased partitions claimed twice: %v", again.txns())
	}
	// One extend renews all three.
	var ext map[string]any
	b.call(t, "POST", "/api/v1/lease/"+pop.LeaseID+"/extend", map[string]any{"seconds": 120}, &ext)
	if ext["renewed"] != float64(3) {
		t.Fatalf("extend renewed %v, want 3", ext["renewed"])
	}
	// Acks are per partition: acking p2 frees p2's cursor only.
	var p2 groupPop
	for _, m := range pop.Messages {
		if m.Partition == "p2" {
			p2.Messages = append(p2.Messages, m)
		}
	}
	p2.LeaseID = pop.LeaseID
	b.ackAll(t, p2, "")
	b.push(t, q, "p2", "p2-d")
	b.push(t, q, "p1", "p1-d")
	if next := b.pop(t, "/api/v1/pop/queue/"+q+"?partitions=0&batch=100"); !sameStrings(next.txns(), []string{"p2-d"}) {
		t.Fatalf("after acking p2 only: %v", next.txns())
	}
}

func TestWidePopBudgetIsShared(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	for i := 0; i < 5; i++ {
		b.push(t, q, fmt.Sprintf("p%d", i), "x", "y", "z")
	}
	pop := b.pop(t, "/api/v1/pop/queue/"+q+"?partitions=-1&batch=7")
	if len(pop.Messages) != 7 || pop.PartitionsClaimed != 3 {
		t.Fatalf("budget 7 over 5x3: %d messages from %d partitions", len(pop.Messages), pop.PartitionsClaimed)
	}
	rest := b.pop(t, "/api/v1/pop/queue/"+q+"?partitions=0&batch=100")
	if len(rest.Messages) != 6 || rest.PartitionsClaimed != 2 {
		t.Fatalf("no cap claims the rest: %d messages from %d partitions", len(rest.Messages), rest.PartitionsClaimed)
	}
}

func TestDiscoveryPopFindsQueuesByNamespaceAndTask(t *testing.T) {
	b := newTestBroker(t)
	ns := fmt.Sprintf("billing%d", time.Now().UnixNano()%1e9)
	b.push(t, ns+".invoice.eu", "Default", "inv-eu")
	b.push(t, ns+".refund.eu", "Default", "ref-eu")
	b.push(t, "other"+ns+".invoice.eu", "Default", "elsewhere")
	var pop struct {
		groupPop
		Queue string `json:"queue"`
	}
	status, _ := b.call(t, "GET", "/api/v1/pop?namespace="+ns+"&task=invoice&consumerGroup=d&subscriptionMode=all", nil, &pop)
	if status != http.StatusOK || !sameStrings(pop.txns(), []string{"inv-eu"}) || pop.Queue != "" || pop.LeaseID == "" {
		t.Fatalf("namespace+task: %d %v queue %q", status, pop.txns(), pop.Queue)
	}
	b.ackAll(t, pop.groupPop, "d")
	all := b.pop(t, "/api/v1/pop?namespace="+ns+"&consumerGroup=d2&subscriptionMode=all&partitions=0&batch=10")
	got := map[string]bool{}
	for _, id := range all.txns() {
		got[id] = true
	}
	if len(got) != 2 || !got["inv-eu"] || !got["ref-eu"] {
		t.Fatalf("namespace only: %v", all.txns())
	}
	// Long poll across the scope: a push to a matching queue wakes it.
	done := make(chan groupPop, 1)
	go func() {
		var p groupPop
		b.call(t, "GET", "/api/v1/pop?namespace="+ns+"&task=invoice&consumerGroup=d&wait=true&timeout=5000", nil, &p)
		done <- p
	}()
	time.Sleep(100 * time.Millisecond)
	b.push(t, ns+".invoice.eu", "Default", "late")
	select {
	case p := <-done:
		if !sameStrings(p.txns(), []string{"late"}) {
			t.Fatalf("woken discovery pop: %v", p.txns())
		}
	case <-time.After(4 * time.Second):
		t.Fatal("discovery long poll was not woken by a push in scope")
	}
}

func TestAutopilotSizesOnlyTheKnobsLeftOut(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	for i := 0; i < 40; i++ {
		b.push(t, q, fmt.Sprintf("p%02d", i), "a", "b")
	}
	base := "/api/v1/pop/queue/" + q + "?autoAck=true&autopilot=true"
	first := b.pop(t, base)
	if first.Autopilot == nil || first.Autopilot.Batch != 100 || first.Autopilot.Partitions < 1 || first.Autopilot.WaitMs == nil {
		t.Fatalf("echo: %+v", first.Autopilot)
	}
	// The backlog is spread over 40 partitions: the width grows past 1, never past 64.
	width := first.Autopilot.Partitions
	for i := 0; i < 10 && width < 20; i++ {
		p := b.pop(t, base)
		if p.Autopilot == nil {
			break
		}
		width = p.Autopilot.Partitions
		if width > 64 || p.PartitionsClaimed > width || len(p.Messages) > p.Autopilot.Batch {
			t.Fatalf("pop %d exceeded its echo: %+v claimed %d", i, p.Autopilot, p.PartitionsClaimed)
		}
	}
	if width < 20 {
		t.Fatalf("width did not grow under a backlog over 40 partitions: %d", width)
	}

	// Explicit knobs are never overridden.
	for i := 0; i < 40; i++ {
		b.push(t, q, fmt.Sprintf("p%02d", i), "c", "d", "e")
	}
	pinned := b.pop(t, base+"&partitions=1")
	if pinned.Autopilot == nil || pinned.Autopilot.Partitions != 1 || pinned.PartitionsClaimed != 1 || pinned.Autopilot.Batch != 100 {
		t.Fatalf("partitions=1 with autopilot: %+v claimed %d", pinned.Autopilot, pinned.PartitionsClaimed)
	}
	batched := b.pop(t, base+"&batch=2")
	if batched.Autopilot == nil || batched.Autopilot.Batch != 2 || len(batched.Messages) != 2 {
		t.Fatalf("batch=2 with autopilot: %+v, %d messages", batched.Autopilot, len(batched.Messages))
	}
	both := b.pop(t, base+"&batch=3&partitions=2")
	if both.Autopilot != nil || len(both.Messages) != 3 || both.PartitionsClaimed > 2 {
		t.Fatalf("both knobs set: echo %+v, %d messages from %d partitions", both.Autopilot, len(both.Messages), both.PartitionsClaimed)
	}
	if plain := b.pop(t, "/api/v1/pop/queue/"+q+"?autoAck=true"); plain.Autopilot != nil || plain.PartitionsClaimed != 1 {
		t.Fatalf("without autopilot: echo %+v, %d partitions", plain.Autopilot, plain.PartitionsClaimed)
	}
	// The pinned-partition route echoes width 1 (fresh work there: the pops above may have drained it).
	b.push(t, q, "p39", "f")
	if p := b.pop(t, "/api/v1/pop/queue/"+q+"/partition/p39?autoAck=true&autopilot=true"); p.Autopilot == nil || p.Autopilot.Partitions != 1 {
		t.Fatalf("pinned route echo: %+v", p.Autopilot)
	}
}

func TestAutopilotSwitchShadowAndOffServeLegacySizes(t *testing.T) {
	for _, mode := range []string{engine.AutopilotShadow, engine.AutopilotOff} {
		t.Run(mode, func(t *testing.T) {
			b := newTestBrokerWith(t, engine.Config{PopAutopilot: mode})
			q := uniqueQueue(t)
			for i := 0; i < 5; i++ {
				b.push(t, q, fmt.Sprintf("p%d", i), "a")
			}
			p := b.pop(t, "/api/v1/pop/queue/"+q+"?autoAck=true&autopilot=true")
			if p.Autopilot != nil || p.PartitionsClaimed != 1 {
				t.Fatalf("%s: echo %+v, claimed %d", mode, p.Autopilot, p.PartitionsClaimed)
			}
		})
	}
}

func configure(t *testing.T, b *testBroker, q string, options map[string]any) {
	t.Helper()
	if status, _ := b.call(t, "POST", "/api/v1/configure", map[string]any{"queue": q, "options": options}, nil); status != 200 {
		t.Fatalf("configure: %d", status)
	}
}

func TestDelayedProcessingDeliversOnlyOldEnoughMessages(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	// A 3 s delay and steps of at least 0.5 s keep every check well clear of a boundary.
	configure(t, b, q, map[string]any{"delayedProcessing": 3})
	b.push(t, q, "p", "early") // t = 0
	time.Sleep(1500 * time.Millisecond)
	b.push(t, q, "p", "late") // t = 1.5
	if p := b.pop(t, "/api/v1/pop/queue/"+q+"?batch=10"); len(p.Messages) != 0 {
		t.Fatalf("delivered before 3 s: %v", p.txns())
	}
	time.Sleep(2000 * time.Millisecond) // t = 3.5: early is 3.5 s old, late 2 s
	p := b.pop(t, "/api/v1/pop/queue/"+q+"?batch=10")
	if !sameStrings(p.txns(), []string{"early"}) {
		t.Fatalf("at ~3.5 s: %v, want [early]", p.txns())
	}
	b.ackAll(t, p, "")
	time.Sleep(1500 * time.Millisecond) // t = 5: late is 3.5 s old
	if p := b.pop(t, "/api/v1/pop/queue/"+q+"?batch=10"); !sameStrings(p.txns(), []string{"late"}) {
		t.Fatalf("late after its delay: %v", p.txns())
	}
}

func TestWindowBufferHoldsARecentlyWrittenPartition(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	// A 3 s window and steps of at least 0.5 s keep every check well clear of a boundary.
	configure(t, b, q, map[string]any{"windowBuffer": 3})
	b.push(t, q, "quiet", "q1") // t = 0
	time.Sleep(1500 * time.Millisecond)
	b.push(t, q, "busy", "b1") // t = 1.5
	time.Sleep(500 * time.Millisecond)
	b.push(t, q, "busy", "b2") // t = 2.0: busy keeps being written, its window restarts
	if p := b.pop(t, "/api/v1/pop/queue/"+q+"?partitions=0&batch=10"); len(p.Messages) != 0 {
		t.Fatalf("delivered inside the window: %v", p.txns())
	}
	time.Sleep(1500 * time.Millisecond) // t = 3.5: quiet last written 3.5 s ago, busy 1.5 s ago
	if p := b.pop(t, "/api/v1/pop/queue/"+q+"?partitions=0&batch=10"); !sameStrings(p.txns(), []string{"q1"}) {
		t.Fatalf("after quiet's window: %v, want [q1]", p.txns())
	}
	time.Sleep(2000 * time.Millisecond) // t = 5.5: busy last written 3.5 s ago
	if p := b.pop(t, "/api/v1/pop/queue/"+q+"?partitions=0&batch=10"); !sameStrings(p.txns(), []string{"b1", "b2"}) {
		t.Fatalf("after busy's window: %v, want [b1 b2] together", p.txns())
	}
}

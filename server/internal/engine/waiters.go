package engine

import (
	"container/list"
	"context"
	"slices"
	"sync"
	"time"
)

// waiters holds the parked long-poll pops of this broker. A parked pop holds
// a channel, never a database connection.
//
// A push wakes only as many parked pops per consumer group as it touched
// partitions: a partition is claimed by one pop of a group at a time, so
// waking every waiter of the queue would only make the rest run a claim that
// finds nothing. A woken pop that sees more claimable partitions than it took
// passes the wake on (wakeGroup). Pops pinned to a partition wake when that
// partition is touched. Discovery pops, and wakes whose partitions are unknown
// (other brokers' notifications, replays), wake everyone on the queue.
type waiters struct {
	mu      sync.Mutex
	byQueue map[string]*list.List // of *waiter, oldest parked first
	any     map[*waiter]struct{}  // discovery pops: any push may concern them
	// parked counts the waiters not yet woken per (queue, group, pinned
	// partition), for registerBehindPeers.
	parked map[waitKey]int
	// checking counts the claims running per (queue, group, pinned
	// partition), and foundNothing holds, for the keys of parked, when the
	// latest claim of the key that found nothing started: both for
	// registerBehindPeerCheck.
	checking     map[waitKey]int
	foundNothing map[waitKey]time.Time
	// claiming counts the claims of each (queue, group) running on this
	// broker, for claimEnded.
	claiming map[waitKey]int
	// watching holds, per queue, the pops holding for a fuller batch
	// (holdForFullerBatch): every wake of the queue fires them, and they
	// take no wake from the parked pops.
	watching map[string]map[*waiter]struct{}
}

type waitKey struct{ queue, group, partition string }

type waiter struct {
	ch        chan struct{}
	queue     string
	group     string
	partition string // pinned pops only
	elem      *list.Element
	// idle is the pop's request while it waits with no claim of its own
	// running: only then may a push claim for it (takeForHandOff), and only
	// while its caller is still there (idleCtx).
	idle    *PopRequest
	idleCtx context.Context
	// handedOff is set when a push took the pop to claim for it in the push's
	// own round trip; handOff is that claim's answer (nil when the claim
	// failed), set before ch is closed.
	handedOff bool
	handOff   *PopResult
}

func newWaiters() *waiters {
	return &waiters{byQueue: map[string]*list.List{}, any: map[*waiter]struct{}{}, parked: map[waitKey]int{}, claiming: map[waitKey]int{},
		checking: map[waitKey]int{}, foundNothing: map[waitKey]time.Time{}, watching: map[string]map[*waiter]struct{}{}}
}

// claimStarted and claimEnded bracket a claim of a pop of queue; claimEnded
// reports how many other claims of the group were still running: they will
// take claimable partitions this claim saw, so it does not hand those on
// (see leftBehind).
func (w *waiters) claimStarted(queue, group string) (othersRunning int) {
	k := waitKey{queue: queue, group: group}
	w.mu.Lock()
	defer w.mu.Unlock()
	othersRunning = w.claiming[k]
	w.claiming[k]++
	return othersRunning
}

func (w *waiters) claimEnded(queue, group string) (othersRunning int) {
	k := waitKey{queue: queue, group: group}
	w.mu.Lock()
	defer w.mu.Unlock()
	othersRunning = w.claiming[k] - 1
	if othersRunning <= 0 {
		delete(w.claiming, k)
		return 0
	}
	w.claiming[k] = othersRunning
	return othersRunning
}

func (w *waiters) claimsRunning() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, running := range w.claiming {
		n += running
	}
	return n
}

// register parks a pop: its channel is closed by a wake that concerns it
// (queue "" = a discovery pop, woken by any push).
func (w *waiters) register(queue, group, partition string) *waiter {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.registerLocked(queue, group, partition)
}

// registerBehindPeers parks a pop of a queue without claiming first when
// pops of the same group (and partition pin) are parked here already, and
// returns its waiter; nil when none are (the pop claims first). Those peers found nothing claimable, and every
// change since (a push, a lease released by an ack) woke one of them for
// each partition it made claimable: a claim now would find nothing, or race
// the woken peer for its partition. So the newcomer takes its turn behind
// them and the oldest peer gets the next partition. What no wake announces
// (a lease expiring, a delay ending) is found by the parked pops' re-checks,
// as before.
func (w *waiters) registerBehindPeers(queue, group, partition string) *waiter {
	if queue == "" {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.parked[waitKey{queue, group, partition}] == 0 {
		return nil
	}
	return w.registerLocked(queue, group, partition)
}

// checkStarted and checkEnded bracket a claim for a pop of (queue, group,
// pinned partition), for registerBehindPeerCheck: while it runs, and after
// it found nothing, the key's parked pops need not re-check. A key's record
// is kept while pops of it are parked.
func (w *waiters) checkStarted(queue, group, partition string) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.checking[waitKey{queue, group, partition}]++
	return time.Now()
}

func (w *waiters) checkEnded(queue, group, partition string, began time.Time, foundNothing bool) {
	k := waitKey{queue, group, partition}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.checking[k] <= 1 {
		delete(w.checking, k)
	} else {
		w.checking[k]--
	}
	if foundNothing && w.parked[k] > 0 && began.After(w.foundNothing[k]) {
		w.foundNothing[k] = began
	}
}

// registerBehindPeerCheck parks a re-checking pop of a queue without its
// claim, and returns its waiter, when a claim for a pop of the same group
// (and partition pin) is running or, started after since, found nothing; nil
// otherwise (the pop claims). Re-checks find what no wake announces (a lease
// expiring, a delay ending), and one claim finds it for all the group's
// parked pops: the claim that takes it wakes the others for what it leaves
// (leftBehind). Before, every parked pop ran its own claim each second: a
// thousand parked pops of one group, a thousand claims a second that found
// nothing.
func (w *waiters) registerBehindPeerCheck(queue, group, partition string, since time.Time) *waiter {
	if queue == "" {
		return nil
	}
	k := waitKey{queue, group, partition}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.checking[k] == 0 && !w.foundNothing[k].After(since) {
		return nil
	}
	return w.registerLocked(queue, group, partition)
}

// registerFirst parks a pop at the head of its queue's line: one a push took
// from there and claimed nothing for keeps its turn.
func (w *waiters) registerFirst(queue, group, partition string) *waiter {
	w.mu.Lock()
	defer w.mu.Unlock()
	wt := w.registerLocked(queue, group, partition)
	if wt.elem != nil {
		w.byQueue[queue].MoveToFront(wt.elem)
	}
	return wt
}

func (w *waiters) registerLocked(queue, group, partition string) *waiter {
	wt := &waiter{ch: make(chan struct{}), queue: queue, group: group, partition: partition}
	if queue == "" {
		w.any[wt] = struct{}{}
		return wt
	}
	l := w.byQueue[queue]
	if l == nil {
		l = list.New()
		w.byQueue[queue] = l
	}
	wt.elem = l.PushBack(wt)
	w.parked[waitKey{queue, group, partition}]++
	return wt
}

// watch returns a waiter fired by the next wake of queue, whichever
// partitions and group it is for; it parks no pop (see watching).
func (w *waiters) watch(queue string) *waiter {
	wt := &waiter{ch: make(chan struct{}), queue: queue}
	w.mu.Lock()
	defer w.mu.Unlock()
	set := w.watching[queue]
	if set == nil {
		set = map[*waiter]struct{}{}
		w.watching[queue] = set
	}
	set[wt] = struct{}{}
	return wt
}

// unwatch removes a watching waiter whether or not it was fired.
func (w *waiters) unwatch(wt *waiter) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if set := w.watching[wt.queue]; set != nil {
		delete(set, wt)
		if len(set) == 0 {
			delete(w.watching, wt.queue)
		}
	}
}

func (w *waiters) fireWatchingLocked(queue string) {
	for wt := range w.watching[queue] {
		close(wt.ch)
	}
	delete(w.watching, queue)
}

// unregister removes a waiter whether or not it was woken.
func (w *waiters) unregister(wt *waiter) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.removeLocked(wt)
}

func (w *waiters) removeLocked(wt *waiter) {
	if wt.queue == "" {
		delete(w.any, wt)
		return
	}
	if wt.elem == nil {
		return // already woken
	}
	if l := w.byQueue[wt.queue]; l != nil {
		l.Remove(wt.elem)
		if l.Len() == 0 {
			delete(w.byQueue, wt.queue)
		}
	}
	wt.elem = nil
	wt.idle, wt.idleCtx = nil, nil
	w.unpark(wt)
}

// waitIdle marks a parked pop of a queue as waiting with no claim of its own
// running, so a push may claim for it. A pop registers before its own check,
// and a push claiming for it then would claim a second batch beside it.
func (w *waiters) waitIdle(ctx context.Context, wt *waiter, req *PopRequest) {
	if wt.queue == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if wt.elem != nil {
		wt.idle, wt.idleCtx = req, ctx
	}
}

// takeForHandOff removes and returns the oldest idle pop on queue that a
// write to partitions may serve (unpinned, or pinned to one of them) and
// whose group the caller can claim for in one trip (oneTrip), with a copy of
// its request. Its channel stays open until the caller closes it with the
// claim's answer (handOffDone); a wake no longer finds it.
func (w *waiters) takeForHandOff(queue string, partitions []string, oneTrip func(group string) bool) (*waiter, PopRequest) {
	w.mu.Lock()
	defer w.mu.Unlock()
	l := w.byQueue[queue]
	if l == nil {
		return nil, PopRequest{}
	}
	for e := l.Front(); e != nil; e = e.Next() {
		wt := e.Value.(*waiter)
		if wt.idle == nil || wt.idleCtx.Err() != nil || (wt.partition != "" && !slices.Contains(partitions, wt.partition)) || !oneTrip(wt.group) {
			continue
		}
		req := *wt.idle
		w.removeLocked(wt)
		wt.handedOff = true
		return wt, req
	}
	return nil, PopRequest{}
}

// handOffDone gives a taken pop the answer of the claim made for it.
func handOffDone(wt *waiter, res *PopResult) {
	wt.handOff = res
	close(wt.ch)
}

// leaveHandedOff unregisters a pop and, when a push took it to claim for it,
// waits for that claim and returns its answer: the batch is this pop's
// whatever made it stop waiting.
func (w *waiters) leaveHandedOff(wt *waiter) *PopResult {
	w.mu.Lock()
	w.removeLocked(wt)
	handed := wt.handedOff
	w.mu.Unlock()
	if !handed {
		return nil
	}
	<-wt.ch
	return wt.handOff
}

func (w *waiters) unpark(wt *waiter) {
	k := waitKey{wt.queue, wt.group, wt.partition}
	if w.parked[k] <= 1 {
		delete(w.parked, k)
		delete(w.foundNothing, k)
		return
	}
	w.parked[k]--
}

func (w *waiters) fireLocked(wt *waiter) {
	w.removeLocked(wt)
	close(wt.ch)
}

// wake reports a commit that added messages to partitions of queue. With the
// partition names known, each group gets at most one wake per partition;
// partitions == nil wakes every waiter of the queue.
func (w *waiters) wake(queue string, partitions []string) {
	w.wakeServed(queue, partitions, "", len(partitions))
}

// wakeServed is wake after a claim for a pop of group on queue ran in the
// write's own round trip (handOff): that group gets at most groupWakes
// wakes of unpinned pops, for the claimable partitions the claim left.
func (w *waiters) wakeServed(queue string, partitions []string, group string, groupWakes int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if queue == wakeEverything {
		w.wakeAllLocked()
		return
	}
	w.wakeDiscoveryLocked()
	w.fireWatchingLocked(queue)
	l := w.byQueue[queue]
	if l == nil {
		return
	}
	var quota map[string]int
	var touched map[string]bool
	if partitions != nil {
		quota = map[string]int{group: len(partitions) - min(max(groupWakes, 0), len(partitions))}
		touched = make(map[string]bool, len(partitions))
		for _, p := range partitions {
			touched[p] = true
		}
	}
	for e := l.Front(); e != nil; {
		next := e.Next()
		wt := e.Value.(*waiter)
		switch {
		case partitions == nil:
			w.fireLocked(wt)
		case wt.partition != "":
			if touched[wt.partition] {
				w.fireLocked(wt)
			}
		default:
			used := quota[wt.group]
			if used < len(partitions) {
				quota[wt.group] = used + 1
				w.fireLocked(wt)
			}
		}
		e = next
	}
}

// wakeGroup wakes up to n unpinned waiters of one group on queue: the claimable
// partitions a pop saw but did not take.
func (w *waiters) wakeGroup(queue, group string, n int) {
	if n <= 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.fireWatchingLocked(queue)
	l := w.byQueue[queue]
	if l == nil {
		return
	}
	for e := l.Front(); e != nil && n > 0; {
		next := e.Next()
		if wt := e.Value.(*waiter); wt.group == group && wt.partition == "" {
			w.fireLocked(wt)
			n--
		}
		e = next
	}
}

func (w *waiters) wakeDiscoveryLocked() {
	for wt := range w.any {
		close(wt.ch)
	}
	w.any = map[*waiter]struct{}{}
}

func (w *waiters) wakeAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.wakeAllLocked()
}

func (w *waiters) wakeAllLocked() {
	for _, l := range w.byQueue {
		for e := l.Front(); e != nil; e = e.Next() {
			wt := e.Value.(*waiter)
			wt.elem = nil
			close(wt.ch)
		}
	}
	w.byQueue = map[string]*list.List{}
	w.parked = map[waitKey]int{}
	w.foundNothing = map[waitKey]time.Time{}
	for queue := range w.watching {
		w.fireWatchingLocked(queue)
	}
	w.wakeDiscoveryLocked()
}

// parkedKeys counts what parked pops re-check for: each (queue, group,
// pinned partition) of parked pops once, as they share a re-check (see
// registerBehindPeerCheck), and each discovery pop.
func (w *waiters) parkedKeys() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.parked) + len(w.any)
}

// count is the number of parked pops.
func (w *waiters) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(w.any)
	for _, l := range w.byQueue {
		n += l.Len()
	}
	return n
}

package engine

import "sync/atomic"

// StoredSource is the path that stored messages: the source label of
// lanes_messages_pushed_total.
type StoredSource int

const (
	StoredByPush        StoredSource = iota // POST /push (and the SDKs' push)
	StoredByTransaction                     // pushes of a transaction bundle
	StoredByTimer                           // timers that fired
	StoredByReplay                          // dead letters replayed or retried
	StoredBySpool                           // the disk spool's drain
	storedSources
)

// StoredSources lists every source, in label order.
var StoredSources = [...]StoredSource{StoredByPush, StoredByTransaction, StoredByTimer, StoredByReplay, StoredBySpool}

func (s StoredSource) String() string {
	return [...]string{"push", "transaction", "timer", "replay", "spool"}[s]
}

// storedCounters counts messages by source once their commit succeeded,
// whether or not anyone is still waiting for the answer.
type storedCounters [storedSources]atomic.Int64

// StoredMessages reads how many messages source stored since the engine started.
func (e *Engine) StoredMessages(source StoredSource) int64 { return e.stored[source].Load() }

// countStoredResults counts the results of a committed write that stored a message.
func (e *Engine) countStoredResults(source StoredSource, results []PushResult) {
	n := 0
	for i := range results {
		if results[i].Status == PushQueued {
			n++
		}
	}
	e.countStored(source, n)
}

func (e *Engine) countStored(source StoredSource, n int) {
	if n > 0 {
		e.stored[source].Add(int64(n))
	}
}

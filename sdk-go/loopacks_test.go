package lanes

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// loopAcks keeps, per (partition, lease, group), the last completed ack before the first nack,
// and every ack from the first nack on; a cursor naming one transaction id twice goes whole.
func TestLoopAcks(t *testing.T) {
	t.Parallel()
	ack := func(partition, lease, group, txn string, status AckStatus) ackEntry {
		return ackEntry{msg: &Message{PartitionID: partition, LeaseID: lease, ConsumerGroup: group, TransactionID: txn}, status: status}
	}
	txns := func(es []ackEntry) []string {
		var out []string
		for _, e := range es {
			out = append(out, e.msg.TransactionID+":"+string(e.status))
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		entries []ackEntry
		want    []string
	}{
		{"all completed", []ackEntry{ack("p", "l", "", "a", AckCompleted), ack("p", "l", "", "b", AckCompleted), ack("p", "l", "", "c", AckCompleted)},
			[]string{"c:completed"}},
		{"a failure in the middle", []ackEntry{ack("p", "l", "", "a", AckCompleted), ack("p", "l", "", "b", AckCompleted), ack("p", "l", "", "c", AckFailed)},
			[]string{"b:completed", "c:failed"}},
		{"completed after a nack are kept", []ackEntry{
			ack("p", "l", "", "a", AckCompleted), ack("p", "l", "", "b", AckCompleted), ack("p", "l", "", "c", AckRetry), ack("p", "l", "", "d", AckCompleted),
		}, []string{"b:completed", "c:retry", "d:completed"}},
		{"each partition, lease and group apart", []ackEntry{
			ack("p", "l", "", "a", AckCompleted), ack("q", "l", "", "x", AckCompleted), ack("p", "l", "", "b", AckCompleted),
			ack("q", "l", "", "y", AckCompleted), ack("p", "m", "", "c", AckCompleted), ack("p", "l", "g", "d", AckCompleted),
		}, []string{"b:completed", "y:completed", "c:completed", "d:completed"}},
		{"a repeated transaction id keeps its cursor whole", []ackEntry{
			ack("p", "l", "", "x", AckCompleted), ack("p", "l", "", "y", AckCompleted), ack("p", "l", "", "x", AckCompleted),
			ack("q", "l", "", "a", AckCompleted), ack("q", "l", "", "b", AckCompleted),
		}, []string{"x:completed", "y:completed", "x:completed", "b:completed"}},
	} {
		require.Equal(t, tc.want, txns(loopAcks(tc.entries)), tc.name)
	}
}

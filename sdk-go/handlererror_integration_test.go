package lanes_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	lanes "github.com/lanesmq/lanes/sdk-go"
)

var errNegativeAmount = errors.New("negative amount")

// deadLetterText is the errorMessage of the queue's one dead letter.
func deadLetterText(t *testing.T, b bundle) string {
	t.Helper()
	list, err := b.c.Admin().ListDLQ(b.ctx, lanes.DLQQuery{Queue: b.queue})
	require.NoError(t, err)
	require.Len(t, list.Messages, 1)
	require.NotNil(t, list.Messages[0].ErrorMessage)
	return *list.Messages[0].ErrorMessage
}

// pushFailingAtOnce pushes n messages to partition of a queue whose failures dead-letter at
// once (no retry), so a failing handler leaves one dead letter each.
func pushFailingAtOnce(t *testing.T, b bundle, partition string, n int, prefix string) {
	t.Helper()
	_, err := b.c.Queue(b.queue).Configure(b.ctx, lanes.QueueOptions{RetryLimit: ptrTo(0)})
	require.NoError(t, err)
	pushN(t, b, partition, n, prefix)
}

// onlyReported waits for cons to end without error and answers what it reported: one error.
func onlyReported(t *testing.T, cons *lanes.Consumer, reported *errorLog) []error {
	t.Helper()
	<-cons.Done()
	require.NoError(t, cons.Err())
	errs := reported.all()
	require.Len(t, errs, 1)
	return errs
}

// With ReportHandlerErrors(true) OnError receives a *HandlerError naming the message the handler
// failed on (transaction id, queue, partition) and wrapping the handler's own error, which
// errors.Is still reaches; the dead letter's errorMessage stays the handler's own text.
func TestITHandlerErrorNamesItsMessage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pushFailingAtOnce(t, b, "acct-7", 1, "pay")
	var reported errorLog
	cons, err := b.c.Queue(b.queue).Wait(false).Limit(1).ReportHandlerErrors(true).OnError(reported.add).
		Consume(b.ctx, func(context.Context, *lanes.Message) error { return errNegativeAmount })
	require.NoError(t, err)
	errs := onlyReported(t, cons, &reported)
	var he *lanes.HandlerError
	require.ErrorAs(t, errs[0], &he)
	require.ErrorIs(t, errs[0], errNegativeAmount)
	require.Len(t, he.Messages, 1)
	m := he.Messages[0]
	require.Equal(t, "pay-acct-7-0", m.TransactionID)
	require.Equal(t, "acct-7", m.Partition)
	require.NotEmpty(t, m.PartitionID)
	require.Equal(t, b.queue, m.Queue)
	require.Equal(t, `lanes: handler failed on transaction pay-acct-7-0 (queue "`+b.queue+`", partition "acct-7"): negative amount`, he.Error())
	require.NotContains(t, he.Error(), `"i"`, "no payload in the text")
	require.Equal(t, "negative amount", deadLetterText(t, b), "the ack carries the handler's own text")
}

// A batch handler's HandlerError carries the slice it was given; a panic's wraps the
// *HandlerPanicError, which errors.As still reaches.
func TestITBatchHandlerErrorCarriesItsSlice(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pushFailingAtOnce(t, b, "acct-9", 7, "bulk")
	var reported errorLog
	cons, err := b.c.Queue(b.queue).Wait(false).Batch(10).Limit(7).ReportHandlerErrors(true).OnError(reported.add).
		IdleTimeout(2*time.Second).
		ConsumeBatch(b.ctx, func(context.Context, []*lanes.Message) error { panic("ledger closed") })
	require.NoError(t, err)
	errs := onlyReported(t, cons, &reported)
	var he *lanes.HandlerError
	require.ErrorAs(t, errs[0], &he)
	var pe *lanes.HandlerPanicError
	require.ErrorAs(t, errs[0], &pe)
	require.Equal(t, "ledger closed", pe.Value)
	ids := make([]string, 0, len(he.Messages))
	for _, m := range he.Messages {
		ids = append(ids, m.TransactionID)
	}
	require.Equal(t, []string{"bulk-acct-9-0", "bulk-acct-9-1", "bulk-acct-9-2", "bulk-acct-9-3", "bulk-acct-9-4", "bulk-acct-9-5", "bulk-acct-9-6"}, ids)
	require.Equal(t, `lanes: handler failed on 7 messages, transactions bulk-acct-9-0, bulk-acct-9-1, bulk-acct-9-2, bulk-acct-9-3, bulk-acct-9-4 and 2 more (queue "`+b.queue+`", partition "acct-9"): lanes: handler panicked: ledger closed`, he.Error())
	require.Equal(t, "lanes: handler panicked: ledger closed", deadLetterText(t, b))
}

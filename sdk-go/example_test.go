package lanes_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	lanes "github.com/lanesmq/lanes/sdk-go"
)

// exampleClient connects to LANES_TEST_URL (or LANES_URL / localhost:6632).
func exampleClient() *lanes.Client {
	var opts []lanes.Option
	if u := os.Getenv("LANES_TEST_URL"); u != "" {
		opts = append(opts, lanes.WithURL(u))
	}
	c, err := lanes.New(opts...)
	if err != nil {
		panic(err)
	}
	return c
}

func exampleQueue(name string) string {
	return fmt.Sprintf("example-%s-%d", name, time.Now().UnixNano())
}

// Produce: one lane per customer; items without a TransactionID get a UUIDv7.
func ExampleQueueBuilder_Push() {
	ctx := context.Background()
	client := exampleClient()
	orders := exampleQueue("orders")

	res, err := client.Queue(orders).Partition("customer-42").Push(ctx,
		lanes.Data(map[string]any{"orderId": 9137, "amount": 99.5}),
		lanes.Item{Data: map[string]any{"orderId": 9138}, TransactionID: "order-9138-created"},
	)
	if err != nil {
		panic(err)
	}
	retry, _ := client.Queue(orders).Partition("customer-42").Push(ctx,
		lanes.Item{Data: map[string]any{"orderId": 9138}, TransactionID: "order-9138-created"})
	fmt.Println(res[0].Status, res[1].Status, retry[0].Status)
	// Output: queued queued duplicate
}

// Consume: a group reading everything, ack after the handler, stop after one message.
func ExampleQueueBuilder_Consume() {
	ctx := context.Background()
	client := exampleClient()
	orders := exampleQueue("orders")
	_, _ = client.Queue(orders).Push(ctx, lanes.Data(map[string]int{"orderId": 9137}))

	consumer, err := client.Queue(orders).Group("billing").SubscriptionMode("all").Limit(1).Each().
		Consume(ctx, func(ctx context.Context, m *lanes.Message) error {
			var order struct{ OrderID int }
			if err := m.Decode(&order); err != nil {
				return err // nacked as failed, redelivered
			}
			fmt.Println("order", order.OrderID)
			return nil // acked completed
		})
	if err != nil {
		panic(err)
	}
	<-consumer.Done()
	fmt.Println("done", consumer.Err())
	// Output:
	// order 9137
	// done <nil>
}

// Messages: the pull iterator. A message is acked when the loop asks for the next one; leaving
// the loop early releases the rest with `retry`.
func ExampleQueueBuilder_Messages() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // ends the iteration quietly
	defer cancel()
	client := exampleClient()
	orders := exampleQueue("orders")
	_, _ = client.Queue(orders).Partition("customer-42").Push(ctx,
		lanes.Data(map[string]int{"orderId": 9137}), lanes.Data(map[string]int{"orderId": 9138}))

	for m, err := range client.Queue(orders).Group("billing").SubscriptionMode("all").Limit(2).Messages(ctx) {
		if err != nil {
			panic(err) // terminal (403, 413, other 4xx, 501): the iteration has ended
		}
		var order struct{ OrderID int }
		if err := m.Decode(&order); err != nil {
			break // releases this message and the rest of its pop with `retry`
		}
		fmt.Println("order", order.OrderID)
	}
	// Output:
	// order 9137
	// order 9138
}

// Walk every dead letter of a queue, newest first: All asks for the pages (Limit rows each) after
// the broker's key, so replaying each one as it comes moves none of the rest.
func ExampleDLQBuilder_All() {
	ctx := context.Background()
	client := exampleClient()
	orders := exampleQueue("orders")
	_, _ = client.Queue(orders).Push(ctx, lanes.Data(1), lanes.Data(2), lanes.Data(3))
	for range 3 {
		msgs, _ := client.Queue(orders).Batch(1).Wait(false).Pop(ctx)
		_, _ = client.Ack(ctx, msgs, lanes.AckDLQ, lanes.AckOpts{Error: "poison"})
	}

	for m, err := range client.Queue(orders).DLQ("").Limit(2).All(ctx) {
		if err != nil {
			panic(err) // the walk has ended
		}
		fmt.Println("dead letter", string(m.Data))
		if _, err := client.Admin().ReplayDLQ(ctx, m.Id, "", ""); err != nil {
			panic(err)
		}
	}
	// Output:
	// dead letter 3
	// dead letter 2
	// dead letter 1
}

// Stop: wire SIGTERM to a soft stop that finishes in-flight messages, escalating after 10 s.
func ExampleConsumer_Stop() {
	ctx := context.Background()
	client := exampleClient()
	consumer, err := client.Queue(exampleQueue("jobs")).Concurrency(4).SoftStopTimeout(10*time.Second).
		Consume(ctx, func(ctx context.Context, m *lanes.Message) error { return nil })
	if err != nil {
		panic(err)
	}
	sig, stop := signal.NotifyContext(ctx, syscall.SIGTERM)
	defer stop()
	go func() { <-sig.Done(); _ = consumer.Stop(context.Background()) }()

	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	fmt.Println(consumer.Stop(stopCtx), consumer.Err())
	// Output: <nil> <nil>
}

// Transaction: the pipeline handoff — ack the input and push the output in one commit.
func ExampleTransactionBuilder_Commit() {
	ctx := context.Background()
	client := exampleClient()
	orders, invoices := exampleQueue("orders"), exampleQueue("invoices")
	_, _ = client.Queue(orders).Push(ctx, lanes.Data(map[string]int{"orderId": 9137}))

	msgs, err := client.Queue(orders).Group("invoicing").SubscriptionMode("all").Wait(false).Pop(ctx)
	if err != nil || len(msgs) == 0 {
		panic(fmt.Sprint("pop: ", err))
	}
	_, err = client.Transaction().
		Queue(invoices).Push(lanes.Data(map[string]any{"orderId": 9137, "invoiced": true})).
		Ack(msgs[0], lanes.AckCompleted, "invoicing").
		Commit(ctx)
	if err != nil {
		// *lanes.TransactionError with Reason on rollback
		fmt.Println("not committed")
		return
	}
	fmt.Println("committed")
	// Output: committed
}

// The autopilot off switch: per builder, or LANES_SDK_POP_AUTOPILOT=off for the whole client.
func ExampleQueueBuilder_Autopilot() {
	ctx := context.Background()
	client := exampleClient()
	q := exampleQueue("lanes")
	_, _ = client.Queue(q).Push(ctx, lanes.Data(1), lanes.Data(2))

	msgs, _ := client.Queue(q).Autopilot(false).Wait(false).Pop(ctx) // batch=1, width 1
	fmt.Println(len(msgs))
	// Output: 1
}

// New with failover, token, retry settings and a logger.
func ExampleNew() {
	client, err := lanes.New(
		lanes.WithURL("http://broker-a:6632", "http://broker-b:6632"),
		lanes.WithBearerToken(os.Getenv("LANES_TOKEN")),
		lanes.WithTimeout(10*time.Second),
		lanes.WithRetryAttempts(3),
		lanes.WithRetryDelay(250*time.Millisecond),
		lanes.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))),
	)
	fmt.Println(client != nil, err)
	// Output: true <nil>
}

// The program readme_test.go builds around the Go blocks of README.md: it defines the names the
// README leaves to the reader, puts one order in every queue a block names and runs the block
// its argument numbers against LANES_TEST_URL. The test appends each block as a function
// (readmeBlockN) and the table blocks.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	lanes "github.com/lanesmq/lanes/sdk-go"
)

// Imports only some blocks use.
var _, _, _, _ = errors.As, log.Println, slog.Default, signal.NotifyContext
var _ = syscall.SIGTERM

// readmeBlock is one README block as a function, and the queues it names.
type readmeBlock struct {
	run    func(ctx context.Context) error
	queues []string
}

// Order and the variables below stand for the reader's own values, as README.md says.
type Order struct {
	OrderID int     `json:"orderId"`
	Amount  float64 `json:"amount"`
}

var (
	client  *lanes.Client
	token   = "readme-token"
	order   = Order{OrderID: 9137, Amount: 99.5}
	evt     = map[string]string{"event": "order-paid"}
	invoice = map[string]any{"orderId": 9137, "invoiced": true}
	msg     *lanes.Message // an order leased by the group "invoicing", which the transaction block acks
)

// handle checks that the blocks decode the order they were given.
func handle(_ context.Context, o Order) error {
	if o != order {
		return fmt.Errorf("handled %+v, pushed %+v", o, order)
	}
	return nil
}

func handler(_ context.Context, _ *lanes.Message) error { return nil }

func main() {
	if err := runBlock(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func runBlock(arg string) error {
	i, err := strconv.Atoi(arg)
	if err != nil || i < 0 || i >= len(blocks) {
		return fmt.Errorf("no README block %q", arg)
	}
	// The deadline also ends the blocks whose consume loop or iterator runs until ctx ends.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	client, err = lanes.New(lanes.WithURL(os.Getenv("LANES_TEST_URL")))
	if err != nil {
		return err
	}
	for _, q := range blocks[i].queues {
		if _, err := client.Queue(q).Push(ctx, lanes.Data(order)); err != nil {
			return err
		}
	}
	input := fmt.Sprintf("readme-input-%d", time.Now().UnixNano())
	if _, err := client.Queue(input).Push(ctx, lanes.Data(order)); err != nil {
		return err
	}
	leased, err := client.Queue(input).Group("invoicing").SubscriptionMode("all").Wait(false).Pop(ctx)
	if err != nil {
		return err
	}
	if len(leased) != 1 {
		return fmt.Errorf("popped %d messages for msg, want 1", len(leased))
	}
	msg = leased[0]
	if err := blocks[i].run(ctx); err != nil {
		return err
	}
	return client.Close(context.Background())
}

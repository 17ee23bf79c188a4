// Command lanes-bench drives a running lanes broker over HTTP and reports
// throughput and latency per scenario.
//
//	go run ./bench/cmd/lanes-bench -url http://127.0.0.1:6632 -scenarios push-b1,push-b100,popack,wake
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

type options struct {
	url       string
	duration  time.Duration
	scenarios []string
	jsonOut   string
}

// result is one scenario's figures.
type result struct {
	Scenario    string             `json:"scenario"`
	Messages    int64              `json:"messages"`
	Seconds     float64            `json:"seconds"`
	MsgPerSec   float64            `json:"msgPerSec"`
	LatencyMs   map[string]float64 `json:"latencyMs,omitempty"`
	Lost        int64              `json:"lost"`
	Duplicated  int64              `json:"duplicated"`
	Description string             `json:"description"`
}

func main() {
	var o options
	var scenarios string
	flag.StringVar(&o.url, "url", "http://127.0.0.1:6632", "broker URL")
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "length of each timed scenario")
	flag.StringVar(&scenarios, "scenarios", "push-b1,push-b100,popack,wake", "comma-separated scenarios")
	flag.StringVar(&o.jsonOut, "json", "", "write results as JSON to this file")
	short := flag.Bool("short", false, "3 s per scenario")
	flag.Parse()
	if *short {
		o.duration = 3 * time.Second
	}
	o.scenarios = strings.Split(scenarios, ",")
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, MaxIdleConns: 256}, Timeout: time.Minute}
	b := &bench{o: o, http: client, run: time.Now().UnixNano()}
	var results []result
	for _, s := range o.scenarios {
		var r result
		var err error
		switch s {
		case "push-b1":
			r, err = b.push("push-b1", 64, 1)
		case "push-b100":
			r, err = b.push("push-b100", 8, 100)
		case "popack":
			r, err = b.popAck()
		case "wake":
			r, err = b.wake()
		default:
			err = fmt.Errorf("unknown scenario %q", s)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", s, err)
			os.Exit(1)
		}
		results = append(results, r)
		printResult(r)
	}
	if o.jsonOut != "" {
		buf, _ := json.MarshalIndent(results, "", "  ")
		if err := os.WriteFile(o.jsonOut, buf, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}

func printResult(r result) {
	fmt.Printf("%-10s %10.0f msg/s  (%d msgs in %.1fs)  lost=%d dup=%d", r.Scenario, r.MsgPerSec, r.Messages, r.Seconds, r.Lost, r.Duplicated)
	if len(r.LatencyMs) > 0 {
		keys := make([]string, 0, len(r.LatencyMs))
		for k := range r.LatencyMs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Printf(" %s=%.2fms", k, r.LatencyMs[k])
		}
	}
	fmt.Printf("  — %s\n", r.Description)
}

type bench struct {
	o    options
	http *http.Client
	run  int64
}

func (b *bench) queue(name string) string { return fmt.Sprintf("bench-%s-%d", name, b.run) }

func (b *bench) do(ctx context.Context, method, path string, body any, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		buf, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(buf)
	}
	req, err := http.NewRequestWithContext(ctx, method, b.o.url+path, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := b.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode >= 300 {
		return resp.StatusCode, fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, raw)
	}
	if out != nil && len(raw) > 0 {
		return resp.StatusCode, json.Unmarshal(raw, out)
	}
	return resp.StatusCode, nil
}

type pushItem struct {
	Queue         string `json:"queue"`
	Partition     string `json:"partition"`
	TransactionID string `json:"transactionId"`
	Payload       any    `json:"payload"`
}

type pushResult struct {
	Status string `json:"status"`
}

// push runs producers concurrent producers, each pushing batch-sized requests
// to its own partition for the scenario's duration.
func (b *bench) push(name string, producers, batch int) (result, error) {
	q := b.queue(name)
	ctx, cancel := context.WithTimeout(context.Background(), b.o.duration)
	defer cancel()
	var sent atomic.Int64
	var firstErr atomic.Value
	lat := newRecorder()
	var wg sync.WaitGroup
	start := time.Now()
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			for seq := 0; ctx.Err() == nil; seq++ {
				items := make([]pushItem, batch)
				for i := range items {
					items[i] = pushItem{Queue: q, Partition: fmt.Sprintf("p%d", p), TransactionID: fmt.Sprintf("%d-%d-%d", p, seq, i),
						Payload: map[string]any{"producer": p, "seq": seq, "i": i, "body": "0123456789abcdef0123456789abcdef"}}
				}
				var res []pushResult
				t0 := time.Now()
				if _, err := b.do(context.Background(), "POST", "/api/v1/push", map[string]any{"items": items}, &res); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				lat.add(time.Since(t0))
				for _, r := range res {
					if r.Status == "queued" {
						sent.Add(1)
					}
				}
			}
		}(p)
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	if err, _ := firstErr.Load().(error); err != nil {
		return result{}, err
	}
	return result{Scenario: name, Messages: sent.Load(), Seconds: elapsed, MsgPerSec: float64(sent.Load()) / elapsed,
		LatencyMs:   lat.percentiles(),
		Description: fmt.Sprintf("%d producers × batch %d, one partition each, request latency", producers, batch)}, nil
}

type popResponse struct {
	LeaseID  string `json:"leaseId"`
	Messages []struct {
		TransactionID string `json:"transactionId"`
		PartitionID   string `json:"partitionId"`
	} `json:"messages"`
}

// popAck preloads a backlog over 16 partitions, then drains it with 8
// consumers popping batch 100 and acking each batch; it checks every message
// arrives exactly once.
func (b *bench) popAck() (result, error) {
	q := b.queue("popack")
	const partitions, perPartition, batch = 16, 2000, 100
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, partitions)
	for p := 0; p < partitions; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			for off := 0; off < perPartition; off += batch {
				items := make([]pushItem, batch)
				for i := range items {
					items[i] = pushItem{Queue: q, Partition: fmt.Sprintf("p%d", p), TransactionID: fmt.Sprintf("p%d-%d", p, off+i), Payload: map[string]int{"n": off + i}}
				}
				if _, err := b.do(ctx, "POST", "/api/v1/push", map[string]any{"items": items}, nil); err != nil {
					errs <- err
					return
				}
			}
		}(p)
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return result{}, err
	}
	total := int64(partitions * perPartition)
	var mu sync.Mutex
	seen := make(map[string]int, total)
	var consumed atomic.Int64
	var firstErr atomic.Value
	start := time.Now()
	for c := 0; c < 8; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for consumed.Load() < total {
				var pop popResponse
				status, err := b.do(ctx, "GET", fmt.Sprintf("/api/v1/pop/queue/%s?batch=%d&wait=true&timeout=1000", q, batch), nil, &pop)
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				if status == http.StatusNoContent {
					continue
				}
				acks := make([]map[string]string, len(pop.Messages))
				mu.Lock()
				for i, m := range pop.Messages {
					seen[m.TransactionID]++
					acks[i] = map[string]string{"transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": pop.LeaseID, "status": "completed"}
				}
				mu.Unlock()
				if _, err := b.do(ctx, "POST", "/api/v1/ack/batch", map[string]any{"acknowledgments": acks}, nil); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				consumed.Add(int64(len(pop.Messages)))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	if err, _ := firstErr.Load().(error); err != nil {
		return result{}, err
	}
	var dup int64
	for _, n := range seen {
		if n > 1 {
			dup += int64(n - 1)
		}
	}
	return result{Scenario: "popack", Messages: total, Seconds: elapsed, MsgPerSec: float64(total) / elapsed,
		Lost: total - int64(len(seen)), Duplicated: dup,
		Description: "8 consumers, queue mode, pop batch 100 + ack batch, 16 partitions × 2000 backlog"}, nil
}

// wake measures push→delivery latency of a parked long-poll pop: a consumer is
// parked, a producer pushes one message, the time until the pop returns is recorded.
func (b *bench) wake() (result, error) {
	q := b.queue("wake")
	ctx := context.Background()
	if _, err := b.do(ctx, "GET", "/api/v1/pop/queue/"+q, nil, nil); err != nil {
		return result{}, err
	}
	lat := newRecorder()
	rounds := int(b.o.duration / (60 * time.Millisecond))
	for i := 0; i < rounds; i++ {
		got := make(chan time.Time, 1)
		errc := make(chan error, 1)
		go func() {
			var pop popResponse
			_, err := b.do(ctx, "GET", "/api/v1/pop/queue/"+q+"?wait=true&timeout=5000&autoAck=true", nil, &pop)
			if err == nil && len(pop.Messages) == 0 {
				err = fmt.Errorf("parked pop returned empty")
			}
			got <- time.Now()
			errc <- err
		}()
		time.Sleep(50 * time.Millisecond) // let the pop park
		t0 := time.Now()
		if _, err := b.do(ctx, "POST", "/api/v1/push", map[string]any{"items": []pushItem{{Queue: q, Partition: "p", TransactionID: fmt.Sprintf("w%d", i), Payload: i}}}, nil); err != nil {
			return result{}, err
		}
		delivered := <-got
		if err := <-errc; err != nil {
			return result{}, err
		}
		lat.add(delivered.Sub(t0))
	}
	return result{Scenario: "wake", Messages: int64(rounds), LatencyMs: lat.percentiles(),
		Description: "push→delivery of a parked long-poll pop (includes the push's own commit)"}, nil
}

type recorder struct {
	mu sync.Mutex
	d  []time.Duration
}

func newRecorder() *recorder { return &recorder{} }

func (r *recorder) add(d time.Duration) {
	r.mu.Lock()
	r.d = append(r.d, d)
	r.mu.Unlock()
}

func (r *recorder) percentiles() map[string]float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.d) == 0 {
		return nil
	}
	sort.Slice(r.d, func(i, j int) bool { return r.d[i] < r.d[j] })
	at := func(p float64) float64 {
		i := int(p * float64(len(r.d)-1))
		return float64(r.d[i].Microseconds()) / 1000
	}
	return map[string]float64{"p50": at(0.50), "p99": at(0.99), "p999": at(0.999)}
}

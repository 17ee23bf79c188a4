package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/lanesmq/lanes/server/internal/admission"
	"github.com/lanesmq/lanes/server/internal/testdb"
	"github.com/lanesmq/lanes/server/internal/testlog"
)

// A waiting pop (wait=true with a timeout) runs after the handler chain has
// returned (popsLater), a pop that does not wait inside it. These tests hold
// the two to one answer: status, headers and body, on every pop route.

// rawAnswer is one answer as the client sees it.
type rawAnswer struct {
	status int
	header http.Header
	body   []byte
	took   time.Duration
}

// send sends method path with body ("" for none) and reads the whole answer.
func (b *testBroker) send(t testing.TB, method, path, body string, header http.Header) rawAnswer {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, b.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return rawAnswer{status: resp.StatusCode, header: resp.Header, body: raw, took: time.Since(start)}
}

// volatileKeys hold values that differ between any two pops (ids, leases,
// times); their shape is compared, not their value.
var volatileKeys = map[string]bool{"id": true, "leaseId": true, "partitionId": true, "createdAt": true, "leaseExpiresAt": true}

// comparable is a's status, headers and body with what differs between two
// runs of one case left out: the run's queue name (as Q), volatile values,
// the Date header and Content-Length's value (a createdAt's digits vary).
func (a rawAnswer) comparable(t *testing.T, queue string) string {
	t.Helper()
	var headers []string
	for name, values := range a.header {
		switch name {
		case "Date":
			continue
		case "Content-Length":
			values = []string{"n"}
		}
		headers = append(headers, name+": "+strings.Join(values, ", "))
	}
	slices.Sort(headers)
	body := strings.ReplaceAll(string(a.body), queue, "Q")
	if len(a.body) > 0 && json.Valid(a.body) {
		var v any
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			t.Fatal(err)
		}
		shaped, _ := json.Marshal(maskVolatile(v))
		body = string(shaped)
	}
	return strings.Join(append([]string{http.StatusText(a.status)}, headers...), "\n") + "\n\n" + body
}

func maskVolatile(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, inner := range v {
			if volatileKeys[k] {
				v[k] = "~"
				continue
			}
			v[k] = maskVolatile(inner)
		}
	case []any:
		for i := range v {
			v[i] = maskVolatile(v[i])
		}
	}
	return v
}

// withQuery appends query pairs to path.
func withQuery(path, pairs string) string {
	if strings.Contains(path, "?") {
		return path + "&" + pairs
	}
	return path + "?" + pairs
}

var popSeen = regexp.MustCompile(`"messages":\[\{`)

// Every pop route answers a waiting pop as the same pop without wait: a
// batch, nothing (204), the discovery route's reference 400, a bad parameter
// (400 at once, before parking), a body and a body past the cap, HEAD, autoAck,
// autopilot's echo, a subscription that starts past the backlog, a queue that
// does not exist.
func TestAWaitingPopAnswersAsThePopThatDoesNotWait(t *testing.T) {
	b := newTestBroker(t)
	// setup prepares queue q and returns the pop's path.
	type popCase struct {
		name   string
		want   int // the status of both
		method string
		body   string
		setup  func(q string) string
		// parks: the waiting form has nothing to answer and waits out its timeout.
		parks bool
	}
	pushed := func(path string) func(q string) string {
		return func(q string) string {
			b.push(t, q, "p", "m0", "m1")
			return strings.ReplaceAll(path, "Q", url.PathEscape(q))
		}
	}
	configured := func(path string) func(q string) string {
		return func(q string) string {
			if status, _ := b.call(t, "POST", "/api/v1/configure", map[string]any{"queue": q, "namespace": q, "task": "t"}, nil); status != http.StatusOK {
				t.Fatalf("configure: %d", status)
			}
			return pushed(path)(q)
		}
	}
	none := func(path string) func(q string) string {
		return func(q string) string { return strings.ReplaceAll(path, "Q", url.PathEscape(q)) }
	}
	cases := []popCase{
		{name: "queue batch", want: 200, setup: pushed("/api/v1/pop/queue/Q?batch=5")},
		{name: "partition batch", want: 200, setup: pushed("/api/v1/pop/queue/Q/partition/p?batch=5")},
		{name: "discovery batch", want: 200, setup: configured("/api/v1/pop?namespace=Q&batch=5")},
		{name: "discovery by task", want: 200, setup: configured("/api/v1/pop?namespace=Q&task=t&batch=1")},
		{name: "queue autoAck", want: 200, setup: pushed("/api/v1/pop/queue/Q?batch=5&autoAck=true")},
		{name: "partition autoAck", want: 200, setup: pushed("/api/v1/pop/queue/Q/partition/p?autoAck=true")},
		{name: "queue autopilot", want: 200, setup: pushed("/api/v1/pop/queue/Q?autopilot=true")},
		{name: "discovery autopilot", want: 200, setup: configured("/api/v1/pop?namespace=Q&autopilot=true")},
		{name: "group from the start", want: 200, setup: pushed("/api/v1/pop/queue/Q?consumerGroup=g&subscriptionMode=all&batch=5")},
		{name: "group from a time", want: 200, setup: pushed("/api/v1/pop/queue/Q?consumerGroup=g&subscriptionFrom=2000-01-01T00:00:00Z&batch=5")},
		{name: "group new only", want: 204, setup: pushed("/api/v1/pop/queue/Q?consumerGroup=g&subscriptionMode=new"), parks: true},
		{name: "empty queue", want: 204, setup: pushed("/api/v1/pop/queue/Q/partition/other"), parks: true},
		{name: "no such queue", want: 204, setup: none("/api/v1/pop/queue/Q"), parks: true},
		{name: "no such partition", want: 204, setup: none("/api/v1/pop/queue/Q/partition/p"), parks: true},
		{name: "discovery of nothing", want: 204, setup: none("/api/v1/pop?task=Q"), parks: true},
		{name: "discovery without scope", want: 400, setup: none("/api/v1/pop?consumerGroup=g")},
		{name: "batch zero", want: 400, setup: pushed("/api/v1/pop/queue/Q?batch=0")},
		{name: "batch not a number", want: 400, setup: pushed("/api/v1/pop/queue/Q?batch=x")},
		{name: "batch past the cap", want: 400, setup: pushed("/api/v1/pop/queue/Q?batch=100000000")},
		{name: "an undeclared parameter", want: 200, setup: pushed("/api/v1/pop/queue/Q/partition/p?partitions=2")},
		{name: "unknown subscription mode", want: 400, setup: pushed("/api/v1/pop/queue/Q?consumerGroup=g&subscriptionMode=sometimes")},
		{name: "subscriptionFrom ignored", want: 204, setup: pushed("/api/v1/pop/queue/Q?consumerGroup=g&subscriptionFrom=yesterday"), parks: true},
		{name: "subscriptionFrom past year 9999", want: 400, setup: pushed("/api/v1/pop/queue/Q?consumerGroup=g&subscriptionFrom=9999-12-31T23:59:59-05:00")},
		{name: "blank group", want: 400, setup: configured("/api/v1/pop?namespace=Q&consumerGroup=%20")},
		{name: "autoAck not a boolean", want: 400, setup: pushed("/api/v1/pop/queue/Q?autoAck=maybe")},
		{name: "a body", want: 200, method: "GET", body: `{}`, setup: pushed("/api/v1/pop/queue/Q?batch=5")},
		{name: "a body past the cap", want: 413, method: "GET", body: `{"x":"` + strings.Repeat("x", 8<<10) + `"}`, setup: pushed("/api/v1/pop/queue/Q")},
		{name: "HEAD", want: 405, method: "HEAD", setup: pushed("/api/v1/pop/queue/Q")},
		{name: "POST", want: 405, method: "POST", setup: pushed("/api/v1/pop/queue/Q")},
	}
	const parkFor = 300 * time.Millisecond
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			method := c.method
			if method == "" {
				method = http.MethodGet
			}
			q := uniqueQueue(t)
			at := b.send(t, method, c.setup(q), c.body, nil)
			wq := uniqueQueue(t)
			timeout := 5 * time.Second
			if c.parks {
				timeout = parkFor
			}
			waiting := b.send(t, method, withQuery(c.setup(wq), "wait=true&timeout="+timeoutMs(timeout)), c.body, nil)
			if got, want := waiting.comparable(t, wq), at.comparable(t, q); got != want {
				t.Errorf("the waiting pop answered\n%s\n\nthe pop that does not wait\n%s", got, want)
			}
			if at.status != c.want {
				t.Errorf("the pop that does not wait answered %d %s, want %d", at.status, at.body, c.want)
			}
			if !c.parks && waiting.took > 2*time.Second {
				t.Errorf("the waiting pop answered after %v: it parked with something to answer", waiting.took)
			}
			if c.parks && (waiting.status != http.StatusNoContent || waiting.took < parkFor-50*time.Millisecond) {
				t.Errorf("the waiting pop answered %d after %v, want 204 after its %v timeout", waiting.status, waiting.took, parkFor)
			}
			if at.status == http.StatusOK && !popSeen.Match(at.body) {
				t.Errorf("the pop answered 200 without messages: %s", at.body)
			}
		})
	}
	if n := b.Engine.ParkedPops(); n != 0 {
		t.Errorf("%d pops still parked", n)
	}
}

func timeoutMs(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

// A pop parked until a push wakes it answers the batch as a pop that found
// it at once does, on each of the three routes.
func TestAPopWokenByAPushAnswersAsThePopThatFoundTheMessage(t *testing.T) {
	b := newTestBroker(t)
	for name, path := range map[string]string{
		"queue":     "/api/v1/pop/queue/Q?batch=5",
		"partition": "/api/v1/pop/queue/Q/partition/p?batch=5&autoAck=true",
		"discovery": "/api/v1/pop?namespace=Q&autopilot=true",
	} {
		t.Run(name, func(t *testing.T) {
			prepare := func(q string) string {
				if status, _ := b.call(t, "POST", "/api/v1/configure", map[string]any{"queue": q, "namespace": q}, nil); status != http.StatusOK {
					t.Fatalf("configure: %d", status)
				}
				return strings.ReplaceAll(path, "Q", q)
			}
			q := uniqueQueue(t)
			at := prepare(q)
			b.push(t, q, "p", "m0")
			want := b.send(t, "GET", at, "", nil)

			wq := uniqueQueue(t)
			parked := withQuery(prepare(wq), "wait=true&timeout=10000")
			answered := make(chan rawAnswer, 1)
			go func() { answered <- b.send(t, "GET", parked, "", nil) }()
			waitFor(t, 5*time.Second, "the pop to park", func() bool { return b.Engine.ParkedPops() == 1 })
			b.push(t, wq, "p", "m0")
			select {
			case got := <-answered:
				if g, w := got.comparable(t, wq), want.comparable(t, q); g != w || got.status != http.StatusOK {
					t.Errorf("the woken pop answered\n%s\n\nthe pop that found the message\n%s", g, w)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the push did not wake the parked pop")
			}
		})
	}
}

// A waiting pop is counted as a pop that does not wait: under its route
// template and status in lanes_http_requests_total, with its whole wait in
// the latency histogram, its messages in lanes_messages_popped_total and the
// /metrics snapshot, and as parked in lanes_pop_parked while it waits.
func TestAWaitingPopIsCountedByRouteAndStatus(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	if status, _ := b.call(t, "POST", "/api/v1/configure", map[string]any{"queue": q, "namespace": q}, nil); status != http.StatusOK {
		t.Fatalf("configure: %d", status)
	}
	requests := func(route, status string) string {
		return `lanes_http_requests_total{method="GET",route="` + route + `",status="` + status + `"}`
	}
	const queueRoute, partitionRoute, discoveryRoute = "/api/v1/pop/queue/{queue}", "/api/v1/pop/queue/{queue}/partition/{partition}", "/api/v1/pop"
	var snapshotBefore struct {
		Messages struct{ Popped int } `json:"messages"`
	}
	b.call(t, "GET", "/metrics", nil, &snapshotBefore)
	before := scrape(t, b.URL)

	const parkFor = 600 * time.Millisecond
	parked := make(chan rawAnswer, 1)
	go func() {
		parked <- b.send(t, "GET", "/api/v1/pop?namespace="+q+"&batch=5&wait=true&timeout=10000", "", nil)
	}()
	waitFor(t, 5*time.Second, "the pop to park", func() bool { return b.Engine.ParkedPops() == 1 })
	if gauge := scrape(t, b.URL)["lanes_pop_parked"]; gauge != 1 {
		t.Errorf("lanes_pop_parked = %v while one pop waits, want 1", gauge)
	}
	time.Sleep(parkFor)
	b.push(t, q, "p", "m0", "m1")
	if a := <-parked; a.status != http.StatusOK {
		t.Fatalf("the woken pop answered %d %s", a.status, a.body)
	}
	if a := b.send(t, "GET", "/api/v1/pop/queue/"+q+"/partition/p?wait=true&timeout="+timeoutMs(parkFor), "", nil); a.status != http.StatusNoContent {
		t.Fatalf("the pop of an empty partition answered %d %s", a.status, a.body)
	}
	if a := b.send(t, "GET", "/api/v1/pop/queue/"+q+"?batch=0&wait=true&timeout=10000", "", nil); a.status != http.StatusBadRequest {
		t.Fatalf("the pop of batch 0 answered %d %s", a.status, a.body)
	}
	after := scrape(t, b.URL)
	for series, want := range map[string]float64{
		requests(discoveryRoute, "200"):     1,
		requests(partitionRoute, "204"):     1,
		requests(queueRoute, "400"):         1,
		"lanes_messages_popped_total":       2,
		"lanes_pop_leases_given_back_total": 0,
	} {
		if got := after[series] - before[series]; got != want {
			t.Errorf("%s grew by %v, want %v", series, got, want)
		}
	}
	for route, least := range map[string]time.Duration{discoveryRoute: parkFor, partitionRoute: parkFor} {
		series := `lanes_http_request_duration_seconds_sum{method="GET",route="` + route + `"}`
		if took := after[series] - before[series]; took < least.Seconds() {
			t.Errorf("%s grew by %.3f s, want the pop's wait, at least %v", series, took, least)
		}
	}
	if gauge := after["lanes_pop_parked"]; gauge != 0 {
		t.Errorf("lanes_pop_parked = %v once every pop answered, want 0", gauge)
	}
	var snapshot struct {
		Messages   struct{ Popped int } `json:"messages"`
		ParkedPops int                  `json:"parkedPops"`
	}
	b.call(t, "GET", "/metrics", nil, &snapshot)
	if got := snapshot.Messages.Popped - snapshotBefore.Messages.Popped; got != 2 || snapshot.ParkedPops != 0 {
		t.Errorf("/metrics: messages.popped grew by %d, parkedPops %d; want 2 and 0", got, snapshot.ParkedPops)
	}
}

// With authentication on, a waiting pop is refused before it parks: no token
// 401, a read-only token 403; a read-write token whose expiry passes while
// the pop waits still gets its answer, as a pop is checked once, on arrival.
func TestAWaitingPopIsAuthorisedBeforeItParks(t *testing.T) {
	b := newAuthBroker(t)
	q := uniqueQueue(t)
	path := "/api/v1/pop/queue/" + q + "?wait=true&timeout=5000"
	for _, c := range []struct {
		token string
		want  int
		code  string
	}{
		{"", http.StatusUnauthorized, CodeUnauthorized},
		{hsToken(t, "reader", "read-only"), http.StatusForbidden, CodeForbidden},
	} {
		start := time.Now()
		status, e, header := b.callAs(t, c.token, "GET", path, "")
		if status != c.want || e.Code != c.code || time.Since(start) > 2*time.Second {
			t.Errorf("waiting pop: %d %+v after %v, want %d %s at once", status, e, time.Since(start), c.want, c.code)
		}
		if c.want == http.StatusUnauthorized && header.Get("WWW-Authenticate") != "Bearer" {
			t.Errorf("the 401 lacks WWW-Authenticate: Bearer: %v", header)
		}
	}
	if n := b.Engine.ParkedPops(); n != 0 {
		t.Fatalf("%d refused pops parked", n)
	}
	expiring, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": "writer", "roles": []string{"read-write"}, "exp": time.Now().Add(time.Second).Unix(), "iat": time.Now().Unix(),
	}).SignedString([]byte(testSecret))
	if err != nil {
		t.Fatal(err)
	}
	answered := make(chan int, 1)
	go func() {
		status, _, _ := b.callAs(t, expiring, "GET", "/api/v1/pop/queue/"+q+"?wait=true&timeout=10000", "")
		answered <- status
	}()
	waitFor(t, 5*time.Second, "the pop to park", func() bool { return b.Engine.ParkedPops() == 1 })
	time.Sleep(2 * time.Second) // past the token's expiry
	b.doAs(t, hsToken(t, "pusher", "read-write"), "POST", "/api/v1/push",
		`{"items":[{"queue":"`+q+`","transactionId":"m0","payload":1}]}`, nil)
	select {
	case status := <-answered:
		if status != http.StatusOK {
			t.Fatalf("the pop whose token expired while it waited answered %d, want 200 with the message", status)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the push did not wake the parked pop")
	}
	if status, e, _ := b.callAs(t, expiring, "GET", path, ""); status != http.StatusUnauthorized {
		t.Fatalf("a new pop with the expired token: %d %+v, want 401", status, e)
	}
}

// panickyLogHandler panics on the records whose message is panicOn and
// writes every other one to out.
type panickyLogHandler struct {
	slog.Handler
	panicOn string
}

func (h panickyLogHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.panicOn {
		panic("log handler bug")
	}
	return h.Handler.Handle(ctx, r)
}

// An error the engine returns while a pop waits (here a claim, woken by a
// push, that passes PostgreSQL's statement_timeout) answers as the same error
// of a pop that does not wait, and is logged with the request's path. A
// panic while the waiting pop answers (here in the logger) still answers a
// JSON 500 and logs the panic with the path, as recoverPanics does for any
// handler.
func TestAWaitingPopsErrorsAndPanicsAnswerAsThePopThatDoesNotWait(t *testing.T) {
	writer := newTestBroker(t)
	const failure = "database work passed its deadline"
	for _, panics := range []bool{false, true} {
		name := "error"
		if panics {
			name = "panic"
		}
		t.Run(name, func(t *testing.T) {
			answer := func(waits bool) (rawAnswer, string, string) {
				out := &testlog.Buffer{}
				h := slog.Handler(slog.NewTextHandler(out, nil))
				if panics {
					h = panickyLogHandler{Handler: h, panicOn: failure}
				}
				b := newBrokerWith(t, testDSN+"&statement_timeout=300", Options{Logger: slog.New(h)}, "")
				q, group := uniqueQueue(t), fmt.Sprint("stalled-", time.Now().UnixNano())
				path := "/api/v1/pop/queue/" + q + "?subscriptionMode=all&consumerGroup=" + group
				testdb.StallNextClaim(t, execOn(writer), group, 3*time.Second)
				if !waits {
					writer.push(t, q, "p", "m0")
					return b.send(t, "GET", path, "", nil), q, out.String()
				}
				answered := make(chan rawAnswer, 1)
				go func() { answered <- b.send(t, "GET", path+"&wait=true&timeout=10000", "", nil) }()
				waitFor(t, 5*time.Second, "the pop to park", func() bool { return b.Engine.ParkedPops() == 1 })
				writer.push(t, q, "p", "m0")
				select {
				case a := <-answered:
					return a, q, out.String()
				case <-time.After(5 * time.Second):
					t.Fatal("the parked pop did not answer the push")
				}
				return rawAnswer{}, "", ""
			}
			at, q, atLog := answer(false)
			waiting, wq, waitingLog := answer(true)
			if got, want := waiting.comparable(t, wq), at.comparable(t, q); got != want {
				t.Errorf("the waiting pop answered\n%s\n\nthe pop that does not wait\n%s", got, want)
			}
			wantCode, wantLog := CodeDatabaseTimeout, `level=ERROR msg="`+failure+`"`
			if panics {
				wantCode, wantLog = CodeInternal, `level=ERROR msg="panic serving request"`
			}
			var e errorBody
			if err := json.Unmarshal(waiting.body, &e); err != nil || waiting.status != http.StatusInternalServerError || e.Code != wantCode {
				t.Errorf("the waiting pop answered %d %s, want 500 %s", waiting.status, waiting.body, wantCode)
			}
			for form, log := range map[string]string{"does not wait": atLog, "waits": waitingLog} {
				if !strings.Contains(log, wantLog) || !strings.Contains(log, "path=/api/v1/pop/queue/") {
					t.Errorf("the pop that %s logged no %s with its path:\n%s", form, wantLog, log)
				}
			}
		})
	}
}

// A waiting pop whose client leaves gets its claim given back, as a pop that
// does not wait does: while a push's claim is held in PostgreSQL after the
// pop parked, or while its answer is held before it is sent; an autoAck
// one's messages are counted as undelivered.
func TestAWaitingPopsClientLeavingGetsTheClaimGivenBack(t *testing.T) {
	t.Run("during the claim that ends its wait", func(t *testing.T) {
		b := newBrokerWith(t, testDSN, Options{}, "")
		q, group := uniqueQueue(t), fmt.Sprintf("parked-leaver-%d", time.Now().UnixNano())
		popPath := "/api/v1/pop/queue/" + q + "?batch=10&subscriptionMode=all&consumerGroup=" + group
		leave := startPopToLeave(t, b.testBroker, popPath+"&wait=true&timeout=10000", nil)
		waitFor(t, 5*time.Second, "the pop to park", func() bool { return b.Engine.ParkedPops() == 1 })
		testdb.StallNextClaim(t, execOn(b.testBroker), group, 1500*time.Millisecond)
		pushThree(t, b.testBroker, q)
		waitFor(t, 5*time.Second, "the woken pop's claim", func() bool { return b.Engine.ClaimsRunning() == 1 })
		time.Sleep(300 * time.Millisecond)
		expectGivenBack(t, b, q, group, popPath, leave())
	})
	t.Run("before its answer is sent", func(t *testing.T) {
		b := newBrokerWith(t, testDSN, Options{TestFaults: true}, "")
		q, group := uniqueQueue(t), "late-parked-leaver"
		pushThree(t, b.testBroker, q)
		popPath := "/api/v1/pop/queue/" + q + "?batch=10&subscriptionMode=all&consumerGroup=" + group
		header := holdPopAnswers(t, b, 1)
		left := popAndLeave(t, b.testBroker, popPath+"&wait=true&timeout=10000", header, 500*time.Millisecond)
		expectGivenBack(t, b, q, group, popPath, left)
	})
	t.Run("autoAck", func(t *testing.T) {
		b := newBrokerWith(t, testDSN, Options{TestFaults: true}, "")
		q, group := uniqueQueue(t), "auto-parked-leaver"
		pushThree(t, b.testBroker, q)
		popPath := "/api/v1/pop/queue/" + q + "?batch=10&subscriptionMode=all&autoAck=true&consumerGroup=" + group
		header := holdPopAnswers(t, b, 1)
		popAndLeave(t, b.testBroker, popPath+"&wait=true&timeout=10000", header, 500*time.Millisecond)
		waitFor(t, 10*time.Second, "the undelivered autoAck messages to be counted", func() bool {
			return b.Server.metrics.AutoAckedUndelivered() == 3
		})
		if n := b.Server.metrics.LeasesGivenBack(); n != 0 {
			t.Errorf("lanes_pop_leases_given_back_total = %d, want 0 (an autoAck pop has no lease)", n)
		}
	})
}

// A waiting pop's database deadline is LANES_DB_TIMEOUT_MS on top of its
// wait, as in the handler chain: with a 300 ms budget, a 1 s wait answers 204
// at its timeout, not database_timeout at 300 ms.
func TestAWaitingPopsDeadlineCoversItsWait(t *testing.T) {
	b := newBrokerWith(t, testDSN, Options{DBTimeout: 300 * time.Millisecond}, "")
	a := b.send(t, "GET", "/api/v1/pop/queue/"+uniqueQueue(t)+"?wait=true&timeout=1000", "", nil)
	if a.status != http.StatusNoContent || a.took < 950*time.Millisecond {
		t.Fatalf("a 1 s wait under a 300 ms budget answered %d %s after %v, want 204 after 1 s", a.status, a.body, a.took)
	}
}

// A waiting pop whose client resets the connection mid-answer logs what a
// pop that does not wait logs: the failed send at debug, with the path and
// the 200 already sent, and the claim given back; no ERROR, no second status.
func TestAWaitingPopsClientHangingUpMidAnswerLogsAtDebug(t *testing.T) {
	b, out := hangUpBroker(t)
	queue := uniqueQueue(t)
	pushLargeBatch(t, b, queue)
	sendStallAndReset(t, b.URL, "/api/v1/pop/queue/"+queue+"?batch=200&consumerGroup=stalled&subscriptionMode=all&wait=true&timeout=10000")
	cutShort := `msg="client left before the answer was sent" path=/api/v1/pop/queue/` + queue + " status=200"
	waitFor(t, 5*time.Second, "the failed send's line", func() bool { return strings.Contains(out.String(), cutShort) })
	waitFor(t, 5*time.Second, "the claim to be given back", func() bool {
		return strings.Contains(out.String(), "client left during a pop; claim given back")
	})
	got := out.String()
	for _, wrong := range []string{"level=ERROR", "level=WARN", "superfluous"} {
		if strings.Contains(got, wrong) {
			t.Fatalf("a client hanging up on a waiting pop logged %q:\n%s", wrong, got)
		}
	}
}

// A waiting pop sent with a body (a GET's body is read, capped and ignored)
// holds that body until it answers, as every request holds its own: the body
// budget counts it while the pop waits and frees it once the pop answered.
func TestAWaitingPopsBodyStaysInTheBodyBudgetUntilItAnswers(t *testing.T) {
	budget := admission.NewByteBudget(1<<20, time.Second)
	b := newBrokerWith(t, testDSN, Options{BodyBudget: budget}, "")
	q := uniqueQueue(t)
	body := `{"ignored":true}`
	answered := make(chan rawAnswer, 1)
	go func() { answered <- b.send(t, "GET", "/api/v1/pop/queue/"+q+"?wait=true&timeout=10000", body, nil) }()
	waitFor(t, 5*time.Second, "the pop to park", func() bool { return b.Engine.ParkedPops() == 1 })
	if held := budget.Stats().Held; held != int64(len(body)) {
		t.Errorf("the body budget holds %d bytes while the pop with a %d-byte body waits, want %d", held, len(body), len(body))
	}
	b.push(t, q, "p", "m0")
	if a := <-answered; a.status != http.StatusOK {
		t.Fatalf("the woken pop answered %d %s", a.status, a.body)
	}
	waitFor(t, 5*time.Second, "the body's room to be freed", func() bool { return budget.Stats().Held == 0 })
}

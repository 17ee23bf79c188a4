package api

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/golang-jwt/jwt/v5"

	"github.com/lanesmq/lanes/server/internal/api/gen"
	"github.com/lanesmq/lanes/server/internal/auth"
)

const testSecret = "jwt-test-secret-jwt-test-secret"

func hsToken(t *testing.T, sub string, roles ...string) string {
	t.Helper()
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": sub, "roles": roles, "exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix(),
	}).SignedString([]byte(testSecret))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func newAuthBroker(t *testing.T) *resilientBroker {
	v, err := auth.NewVerifier(auth.Config{Secret: []byte(testSecret)})
	if err != nil {
		t.Fatal(err)
	}
	return newBrokerWith(t, testDSN, Options{Auth: v}, "")
}

// requiredRole is the sentence by which an operation's description in openapi.yaml
// records its role decision.
var requiredRole = regexp.MustCompile(`Required role: ([^.]+)\.`)

// rolesAllowedBy reads the roles an operation's description allows; public
// reports a route that needs no token.
func rolesAllowedBy(t *testing.T, op *openapi3.Operation) (allowed []string, public bool) {
	t.Helper()
	m := requiredRole.FindStringSubmatch(strings.Join(strings.Fields(op.Description), " "))
	if m == nil {
		t.Fatalf("%s names no required role: every route needs a role decision in its description", op.OperationID)
	}
	if strings.HasPrefix(m[1], "none (public") {
		return nil, true
	}
	for _, r := range strings.Split(strings.ReplaceAll(m[1], " or ", ", "), ", ") {
		if !slices.Contains(allRoles, r) {
			t.Fatalf("%s: unknown role %q in %q", op.OperationID, r, m[0])
		}
		allowed = append(allowed, r)
	}
	return allowed, false
}

// checkChallengeDeclared fails unless op's answer for status declares the
// WWW-Authenticate header the broker sends with it, so a client generated from
// the spec can read the challenge. op is nil for a route the spec lacks.
func checkChallengeDeclared(t *testing.T, op *openapi3.Operation, status int) {
	t.Helper()
	if op == nil {
		return
	}
	resp := op.Responses.Status(status)
	if resp == nil || resp.Value == nil {
		t.Errorf("%s declares no %d", op.OperationID, status)
		return
	}
	if _, ok := resp.Value.Headers["WWW-Authenticate"]; !ok {
		t.Errorf("%s: its %d does not declare the WWW-Authenticate header the broker sends", op.OperationID, status)
	}
}

var allRoles = []string{auth.RoleReadOnly, auth.RoleWriteOnly, auth.RoleReadWrite, auth.RoleAdmin}

// TestJWTRoleMatrixOverTheRoutes calls every operation of openapi.yaml on a
// broker with auth on, as each role and without a token, and checks the broker
// enforces the role the operation's description names: a route added to the
// spec without a role decision fails here. Refused calls carry real writes
// (a push, a queue configuration, a KV put, a timer, the maintenance switches),
// and the test checks that none of them changed anything, then that the same
// calls do change it once an allowed role sends them.
func TestJWTRoleMatrixOverTheRoutes(t *testing.T) {
	b := newAuthBroker(t)
	spec, err := gen.GetSpec()
	if err != nil {
		t.Fatal(err)
	}
	tokens := map[string]string{}
	for _, r := range allRoles {
		tokens[r] = hsToken(t, "svc-"+r, r)
	}
	admin := tokens[auth.RoleAdmin]
	q, gone := uniqueQueue(t), uniqueQueue(t)+"-gone"
	ns := "jwt-ns-" + q
	// Deletes address other names, so an allowed delete cannot undo an allowed write.
	params := func(name, method string) string {
		kept := map[string]string{"queue": q, "ns": ns, "key": "k", "timerKey": "t", "group": "g-" + q}
		if method == http.MethodDelete {
			kept = map[string]string{"queue": gone, "ns": ns, "key": "gone", "timerKey": "gone", "group": "g-" + gone}
		}
		if v, ok := kept[name]; ok {
			return v
		}
		if strings.HasSuffix(name, "Id") || name == "id" {
			return "00000000-0000-0000-0000-000000000000"
		}
		return "x-" + name
	}
	timerPayload := base64.StdEncoding.EncodeToString([]byte(`{"n":1}`))
	// By operationId in lower case (the embedded spec capitalises them).
	bodies := map[string]string{
		"push":               `{"items":[{"queue":"` + q + `","payload":1}]}`,
		"configure":          `{"queue":"` + q + `"}`,
		"kvput":              `{"value":1,"forever":true}`,
		"kvbatch":            `{"operations":[{"op":"put","ns":"` + ns + `","key":"b","value":1,"forever":true}]}`,
		"scheduletimers":     `{"operations":[{"op":"schedule","queue":"` + q + `","timerKey":"t","delayMs":3600000,"payload":"` + timerPayload + `"}]}`,
		"setpushmaintenance": `{"enabled":true}`,
		"setpopmaintenance":  `{"enabled":true}`,
		"transaction":        `{"operations":[{"type":"push","items":[{"queue":"` + q + `","payload":2}]}]}`,
	}
	t.Cleanup(func() {
		b.callAs(t, admin, "POST", "/api/v1/system/maintenance", `{"enabled":false}`)
		b.callAs(t, admin, "POST", "/api/v1/system/maintenance/pop", `{"enabled":false}`)
	})
	type call struct {
		method, path, body, op string
		allowed                []string
		public                 bool
		spec                   *openapi3.Operation
	}
	var calls []call
	for path, item := range spec.Paths.Map() {
		for method, op := range item.Operations() {
			c := call{method: method, op: op.OperationID, body: bodies[strings.ToLower(op.OperationID)], spec: op}
			c.allowed, c.public = rolesAllowedBy(t, op)
			c.path = regexp.MustCompile(`\{([^}]+)\}`).ReplaceAllStringFunc(path, func(p string) string {
				return url.PathEscape(params(p[1:len(p)-1], method))
			})
			if c.body == "" && op.RequestBody != nil {
				c.body = "{}"
			}
			calls = append(calls, c)
		}
	}
	if len(calls) < 50 {
		t.Fatalf("the spec has %d operations; expected more", len(calls))
	}
	// The unknown route's level is the documented default, read-write.
	calls = append(calls, call{method: "GET", path: "/api/v1/not-a-route", op: "unknown route", allowed: []string{auth.RoleReadWrite, auth.RoleAdmin}})

	// Every refusal first, so that what they leave behind can be checked.
	refusals := 0
	for _, c := range calls {
		if c.public {
			continue
		}
		status, e, hdr := b.callAs(t, "", c.method, c.path, c.body)
		if status != http.StatusUnauthorized || e.Error != auth.MsgAuthRequired || e.Code != "unauthorized" || hdr.Get("WWW-Authenticate") != "Bearer" {
			t.Errorf("%s %s (%s) without a token: %d %+v, want 401 %q", c.method, c.path, c.op, status, e, auth.MsgAuthRequired)
		}
		checkChallengeDeclared(t, c.spec, status)
		for _, role := range allRoles {
			if slices.Contains(c.allowed, role) {
				continue
			}
			refusals++
			status, e, hdr := b.callAs(t, tokens[role], c.method, c.path, c.body)
			if status != http.StatusForbidden || e.Error != auth.MsgForbidden || e.Code != "forbidden" || hdr.Get("WWW-Authenticate") != wantChallenge(403, auth.MsgForbidden) {
				t.Errorf("%s %s (%s) as %s: %d %+v, want 403 %q", c.method, c.path, c.op, role, status, e, auth.MsgForbidden)
			}
			checkChallengeDeclared(t, c.spec, status)
		}
	}
	if refusals < 50 {
		t.Fatalf("only %d refusals: the matrix is not being exercised", refusals)
	}
	written := func() map[string]bool {
		status, _, _ := b.callAs(t, admin, "GET", "/api/v1/resources/queues/"+q, "")
		var maint, popMaint struct{ Enabled bool }
		b.doAs(t, admin, "GET", "/api/v1/system/maintenance", "", &maint)
		b.doAs(t, admin, "GET", "/api/v1/system/maintenance/pop", "", &popMaint)
		var kv, kvBatch, timer struct{ Found bool }
		b.doAs(t, admin, "GET", "/api/v1/kv/"+ns+"/k", "", &kv)
		b.doAs(t, admin, "GET", "/api/v1/kv/"+ns+"/b", "", &kvBatch)
		b.doAs(t, admin, "GET", "/api/v1/timers/"+q+"/t", "", &timer)
		return map[string]bool{
			"queue": status == http.StatusOK, "push maintenance": maint.Enabled, "pop maintenance": popMaint.Enabled,
			"kv put": kv.Found, "kv batch put": kvBatch.Found, "timer": timer.Found,
		}
	}
	for what, changed := range written() {
		if changed {
			t.Errorf("refused calls changed the broker: %s", what)
		}
	}

	for _, c := range calls {
		roles := c.allowed
		if c.public {
			roles = allRoles
			if status, e, _ := b.callAs(t, "", c.method, c.path, c.body); status == http.StatusUnauthorized || status == http.StatusForbidden {
				t.Errorf("public %s %s (%s) without a token: %d %+v", c.method, c.path, c.op, status, e)
			}
		}
		for _, role := range roles {
			status, e, _ := b.callAs(t, tokens[role], c.method, c.path, c.body)
			if status == http.StatusUnauthorized || status == http.StatusForbidden && e.Code == "forbidden" {
				t.Errorf("%s %s (%s) as %s: %d %+v, want allowed", c.method, c.path, c.op, role, status, e)
			}
		}
	}
	for what, changed := range written() {
		if !changed {
			t.Errorf("the allowed calls did not write %s: the refused ones proved nothing", what)
		}
	}
}

func TestJWTStampsTheTokenSubjectAsProducerSub(t *testing.T) {
	b := newAuthBroker(t)
	q := uniqueQueue(t)
	body := `{"items":[{"queue":"` + q + `","payload":{"k":1},"producerSub":"spoofed"}]}`
	if status, e, _ := b.callAs(t, hsToken(t, "producer-7", auth.RoleWriteOnly), "POST", "/api/v1/push", body); status != http.StatusCreated {
		t.Fatalf("push: %d %+v", status, e)
	}
	req, _ := http.NewRequest(http.MethodGet, b.URL+"/api/v1/pop/queue/"+q, nil)
	req.Header.Set("Authorization", "Bearer "+hsToken(t, "consumer-1", auth.RoleReadWrite))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var popped struct {
		Messages []struct {
			ProducerSub *string `json:"producerSub"`
		} `json:"messages"`
	}
	decodeJSON(t, resp, &popped)
	if len(popped.Messages) != 1 || popped.Messages[0].ProducerSub == nil || *popped.Messages[0].ProducerSub != "producer-7" {
		t.Fatalf("pop must echo the pushing token's sub: %+v", popped)
	}
}

func TestJWTRejectsBadTokensWithTheFixedMessages(t *testing.T) {
	b := newAuthBroker(t)
	key, _ := rsa.GenerateKey(rand.Reader, 2048)
	expired, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "x", "roles": []string{"admin"}, "exp": time.Now().Add(-time.Minute).Unix()}).SignedString([]byte(testSecret))
	forged, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "x", "roles": []string{"admin"}}).SignedString([]byte("not-the-secret-not-the-secret"))
	rsSigned, _ := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"sub": "x", "roles": []string{"admin"}, "exp": time.Now().Add(time.Hour).Unix()}).SignedString(key)
	cases := map[string]string{
		"Token has expired":           expired,
		"Invalid token signature":     forged,
		"Unsupported token algorithm": rsSigned,
		"Bad token header":            "abc.def",
	}
	for want, tok := range cases {
		status, e, _ := b.callAs(t, tok, "GET", "/api/v1/resources/queues", "")
		if status != http.StatusUnauthorized || e.Error != want {
			t.Errorf("want 401 %q, got %d %+v", want, status, e)
		}
	}
	// An RS256 broker accepts RS256 tokens from its key.
	der, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	v, err := auth.NewVerifier(auth.Config{PublicKey: string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})), Algorithm: "RS256"})
	if err != nil {
		t.Fatal(err)
	}
	rs := newBrokerWith(t, testDSN, Options{Auth: v}, "")
	if status, e, _ := rs.callAs(t, rsSigned, "GET", "/api/v1/resources/queues", ""); status != http.StatusOK {
		t.Fatalf("RS256 token on an RS256 broker: %d %+v", status, e)
	}
	if status, e, _ := rs.callAs(t, hsToken(t, "x", "admin"), "GET", "/api/v1/resources/queues", ""); status != http.StatusUnauthorized || !strings.Contains(e.Error, "algorithm") {
		t.Fatalf("HS256 token on an RS256 broker: %d %+v", status, e)
	}
}

func TestJWTMissingIssuerOrAudienceAnswersAsAWrongOne(t *testing.T) {
	v, err := auth.NewVerifier(auth.Config{Secret: []byte(testSecret), Issuer: "lanes-iss", Audience: "lanes-aud"})
	if err != nil {
		t.Fatal(err)
	}
	b := newBrokerWith(t, testDSN, Options{Auth: v}, "")
	sign := func(claims jwt.MapClaims) string {
		claims["sub"], claims["role"], claims["exp"] = "svc", auth.RoleAdmin, time.Now().Add(time.Hour).Unix()
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(testSecret))
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	cases := []struct {
		name, token, want string
	}{
		{"no iss", sign(jwt.MapClaims{"aud": "lanes-aud"}), "Invalid token issuer"},
		{"wrong iss", sign(jwt.MapClaims{"iss": "other", "aud": "lanes-aud"}), "Invalid token issuer"},
		{"no aud", sign(jwt.MapClaims{"iss": "lanes-iss"}), "Invalid token audience"},
		{"wrong aud", sign(jwt.MapClaims{"iss": "lanes-iss", "aud": "other"}), "Invalid token audience"},
	}
	for _, c := range cases {
		status, e, _ := b.callAs(t, c.token, "GET", "/api/v1/resources/queues", "")
		if status != http.StatusUnauthorized || e.Error != c.want || e.Code != "unauthorized" {
			t.Errorf("%s: want 401 %q, got %d %+v", c.name, c.want, status, e)
		}
	}
	if status, e, _ := b.callAs(t, sign(jwt.MapClaims{"iss": "lanes-iss", "aud": "lanes-aud"}), "GET", "/api/v1/resources/queues", ""); status != http.StatusOK {
		t.Fatalf("right iss and aud: %d %+v", status, e)
	}
}

// TestMadeUpMethodsAddNoMetricSeries sends requests with invented methods, as
// an anonymous client could, and checks they are all counted under one
// method="OTHER" series instead of one series per method.
func TestMadeUpMethodsAddNoMetricSeries(t *testing.T) {
	b := newAuthBroker(t)
	send := func(method string) {
		req, err := http.NewRequest(method, b.URL+"/api/v1/push", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("%s without a token: %d", method, resp.StatusCode)
		}
	}
	series := func() map[string]float64 {
		out := map[string]float64{}
		for k, v := range scrape(t, b.URL) {
			if strings.HasPrefix(k, "lanes_http_request") {
				out[k] = v
			}
		}
		return out
	}
	scrape(t, b.URL) // the scrape's own series exist from here on
	send("MADEUP0")
	before := series()
	for i := 1; i <= 20; i++ {
		send(fmt.Sprintf("MADEUP%d", i))
	}
	after := series()
	if len(after) != len(before) {
		var added []string
		for k := range after {
			if _, ok := before[k]; !ok {
				added = append(added, k)
			}
		}
		t.Fatalf("20 made-up methods added %d series: %v", len(added), added)
	}
	other := `lanes_http_requests_total{method="OTHER",route="unmatched",status="401"}`
	for k := range after {
		if strings.Contains(k, "MADEUP") {
			t.Fatalf("a made-up method became a label value: %s", k)
		}
	}
	if after[other] != 21 {
		t.Fatalf("%s = %v, want 21", other, after[other])
	}
	send(http.MethodPatch) // a standard method keeps its own label
	if _, ok := series()[`lanes_http_requests_total{method="PATCH",route="unmatched",status="401"}`]; !ok {
		t.Fatal("PATCH must keep its own method label")
	}
}

// TestHandlerRefusesFaultScriptsWithAuth: the fault injector wraps the whole
// chain, authentication included, so a server with both must not build.
func TestHandlerRefusesFaultScriptsWithAuth(t *testing.T) {
	v, err := auth.NewVerifier(auth.Config{Secret: []byte(testSecret)})
	if err != nil {
		t.Fatal(err)
	}
	tb := newTestBroker(t)
	if _, err := NewServer(tb.Engine, Options{Auth: v, TestFaults: true}).Handler(); err == nil {
		t.Fatal("Handler built a fault injector outside JWT authentication")
	}
	if _, err := NewServer(tb.Engine, Options{TestFaults: true}).Handler(); err != nil {
		t.Fatalf("fault scripts without auth: %v", err)
	}
}

// TestJWTStampsTheSubjectOnTransactionPushesAndTimers: a push inside a
// transaction bundle carries its token's sub like a plain push, and a timer
// records the sub of the token that scheduled it (shown by the timer GET) and
// stamps it on the message it pushes when it fires.
func TestJWTStampsTheSubjectOnTransactionPushesAndTimers(t *testing.T) {
	b := newAuthBroker(t)
	q := uniqueQueue(t)
	admin := hsToken(t, "admin-1", auth.RoleAdmin)
	timerPayload := func(n int) string { return base64.StdEncoding.EncodeToString(fmt.Appendf(nil, `{"n":%d}`, n)) }

	var tx struct {
		Success bool `json:"success"`
	}
	b.doAs(t, hsToken(t, "bob", auth.RoleReadWrite), "POST", "/api/v1/transaction", `{"operations":[
		{"type":"push","items":[{"queue":"`+q+`","partition":"p","payload":{"n":1},"producerSub":"spoofed"}]},
		{"type":"push","queue":"`+q+`","partition":"p","payload":{"n":2}}],
		"timers":[{"op":"schedule","queue":"`+q+`","timerKey":"rider","partition":"p","delayMs":0,"payload":"`+timerPayload(3)+`"}]}`, &tx)
	if !tx.Success {
		t.Fatalf("transaction: %+v", tx)
	}
	b.doAs(t, hsToken(t, "dave", auth.RoleWriteOnly), "POST", "/api/v1/timers",
		`{"operations":[{"op":"schedule","queue":"`+q+`","timerKey":"direct","partition":"p","delayMs":0,"payload":"`+timerPayload(4)+`"}]}`, nil)

	for key, want := range map[string]string{"rider": "bob", "direct": "dave"} {
		var tm struct {
			Found       bool    `json:"found"`
			ProducerSub *string `json:"producerSub"`
		}
		b.doAs(t, admin, "GET", "/api/v1/timers/"+q+"/"+key, "", &tm)
		if !tm.Found || tm.ProducerSub == nil || *tm.ProducerSub != want {
			t.Errorf("timer %s: producerSub %v, want %q", key, tm.ProducerSub, want)
		}
	}
	b.fireDueTimers(t)
	var popped struct {
		Messages []struct {
			Data        struct{ N int } `json:"data"`
			ProducerSub *string         `json:"producerSub"`
		} `json:"messages"`
	}
	b.doAs(t, admin, "GET", "/api/v1/pop/queue/"+q+"?batch=10&wait=false", "", &popped)
	got := map[int]string{}
	for _, m := range popped.Messages {
		got[m.Data.N] = "<null>"
		if m.ProducerSub != nil {
			got[m.Data.N] = *m.ProducerSub
		}
	}
	want := map[int]string{1: "bob", 2: "bob", 3: "bob", 4: "dave"}
	if !maps.Equal(got, want) {
		t.Fatalf("producerSub by message: got %v, want %v", got, want)
	}
}

// A dead letter keeps the subject of the token that pushed the message: the
// listing and the message detail show it, and a replay (by an admin, whose
// subject is not the producer's) and a retry push the message under it again.
func TestJWTReplayedDeadLetterKeepsItsProducerSub(t *testing.T) {
	b := newAuthBroker(t)
	q := uniqueQueue(t)
	producer := hsToken(t, "producer-9", auth.RoleWriteOnly)
	worker := hsToken(t, "worker-3", auth.RoleReadWrite)
	admin := hsToken(t, "admin-1", auth.RoleAdmin)
	type popped struct {
		LeaseID  string `json:"leaseId"`
		Messages []struct {
			TransactionID string  `json:"transactionId"`
			PartitionID   string  `json:"partitionId"`
			ProducerSub   *string `json:"producerSub"`
		} `json:"messages"`
	}
	// popOne pops the single message of the queue as the worker and checks its producerSub.
	popOne := func(stage string) popped {
		t.Helper()
		var p popped
		b.doAs(t, worker, "GET", "/api/v1/pop/queue/"+q+"?wait=false", "", &p)
		if len(p.Messages) != 1 || p.Messages[0].ProducerSub == nil || *p.Messages[0].ProducerSub != "producer-9" {
			t.Fatalf("%s: pop must carry the original producer's sub: %+v", stage, p)
		}
		return p
	}
	// deadLetter pops the message and acks it into the dead-letter queue.
	deadLetter := func(stage string) (txn, partitionID string) {
		t.Helper()
		p := popOne(stage)
		m := p.Messages[0]
		b.doAs(t, worker, "POST", "/api/v1/ack", fmt.Sprintf(`{"transactionId":%q,"partitionId":%q,"leaseId":%q,"status":"dlq","error":"poison"}`,
			m.TransactionID, m.PartitionID, p.LeaseID), nil)
		return m.TransactionID, m.PartitionID
	}
	// listed returns the queue's one dead letter, checking its producerSub.
	listed := func(stage string) string {
		t.Helper()
		var list struct {
			Messages []struct {
				ID          string  `json:"id"`
				ProducerSub *string `json:"producerSub"`
			} `json:"messages"`
		}
		b.doAs(t, admin, "GET", "/api/v1/dlq?queue="+q, "", &list)
		if len(list.Messages) != 1 || list.Messages[0].ProducerSub == nil || *list.Messages[0].ProducerSub != "producer-9" {
			t.Fatalf("%s: the dead letter must show its producer's sub: %+v", stage, list)
		}
		return list.Messages[0].ID
	}

	b.doAs(t, producer, "POST", "/api/v1/push", `{"items":[{"queue":"`+q+`","transactionId":"poison-1","payload":{"n":1}}]}`, nil)
	txn, pid := deadLetter("first delivery")
	var detail struct {
		Status      string  `json:"status"`
		ProducerSub *string `json:"producerSub"`
	}
	b.doAs(t, admin, "GET", "/api/v1/messages/"+pid+"/"+txn, "", &detail)
	if detail.ProducerSub == nil || *detail.ProducerSub != "producer-9" {
		t.Fatalf("message detail of a dead letter: %+v", detail)
	}
	b.doAs(t, admin, "POST", "/api/v1/dlq/"+listed("after the first dead-lettering")+"/replay", "{}", nil)
	txn, pid = deadLetter("after the replay")
	listed("after the second dead-lettering")
	b.doAs(t, admin, "POST", "/api/v1/messages/"+pid+"/"+txn+"/retry", "", nil)
	popOne("after the retry")
}

// A token without exp would be valid for ever: the broker refuses it with a
// 401 that says why, unless told to accept it (LANES_JWT_REQUIRE_EXP=false).
func TestJWTWithoutExpiryIsRefusedUnlessAllowed(t *testing.T) {
	noExp, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "forever", "roles": []string{auth.RoleAdmin},
		"iat": time.Now().Unix()}).SignedString([]byte(testSecret))
	if err != nil {
		t.Fatal(err)
	}
	strict := newAuthBroker(t)
	status, e, hdr := strict.callAs(t, noExp, "GET", "/api/v1/resources/queues", "")
	if status != http.StatusUnauthorized || e.Error != auth.MsgNoExpiry || e.Code != "unauthorized" || hdr.Get("WWW-Authenticate") != wantChallenge(401, auth.MsgNoExpiry) {
		t.Fatalf("token without exp: %d %+v, want 401 %q", status, e, auth.MsgNoExpiry)
	}
	v, err := auth.NewVerifier(auth.Config{Secret: []byte(testSecret), AllowNoExpiry: true})
	if err != nil {
		t.Fatal(err)
	}
	lenient := newBrokerWith(t, testDSN, Options{Auth: v}, "")
	if status, e, _ := lenient.callAs(t, noExp, "GET", "/api/v1/resources/queues", ""); status != http.StatusOK {
		t.Fatalf("token without exp on a broker that allows it: %d %+v", status, e)
	}
}

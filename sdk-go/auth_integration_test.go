package lanes_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	lanes "github.com/lanesmq/lanes/sdk-go"
)

// authBroker is the test broker with JWT auth on (LANES_TEST_AUTH_URL, started by
// scripts/make-with-test-broker.sh) and the HS256 secret its tokens are signed with.
func authBroker(t *testing.T) (url, secret string) {
	t.Helper()
	url, secret = os.Getenv("LANES_TEST_AUTH_URL"), os.Getenv("LANES_TEST_JWT_SECRET")
	if url == "" || secret == "" {
		t.Skip("LANES_TEST_AUTH_URL and LANES_TEST_JWT_SECRET are not set: `make test` starts a broker with auth on")
	}
	return url, secret
}

// hs256 mints a token for role, valid for an hour (the broker verifies it with its JWT library).
func hs256(t *testing.T, secret, role string) string {
	t.Helper()
	return hs256As(t, secret, role, "sdk-go-"+role)
}

// hs256As mints a token for role whose subject is sub.
func hs256As(t *testing.T, secret, role, sub string) string {
	t.Helper()
	enc := func(v any) string {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	now := time.Now().Unix()
	signing := enc(map[string]string{"alg": "HS256", "typ": "JWT"}) + "." + enc(map[string]any{"sub": sub, "role": role, "iat": now, "exp": now + 3600})
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(signing))
	return signing + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// A client sends its token; a missing or bad one fails with ErrUnauthorized and a
// role the route does not allow with ErrForbidden, each after one request (no retry),
// and a consumer whose token the broker refuses ends with that error instead of polling on.
func TestITAuthTokenAndRefusals(t *testing.T) {
	t.Parallel()
	url, secret := authBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	queue := fmt.Sprintf("sdkgo-auth-%d", time.Now().UnixNano())
	client := func(token string) (*lanes.Client, *countingTransport) {
		via := &countingTransport{}
		opts := []lanes.Option{lanes.WithURL(url), lanes.WithHTTPClient(&http.Client{Transport: via})}
		if token != "" {
			opts = append(opts, lanes.WithBearerToken(token))
		}
		c, err := lanes.New(opts...)
		require.NoError(t, err)
		closeWhenDone(t, c)
		return c, via
	}

	rw, _ := client(hs256(t, secret, "read-write"))
	res, err := rw.Queue(queue).Push(ctx, lanes.Data(1))
	require.NoError(t, err)
	require.Equal(t, lanes.StatusQueued, res[0].Status)

	for name, token := range map[string]string{"no token": "", "wrong key": hs256(t, "not-the-secret-not-the-secret-0123", "admin")} {
		c, via := client(token)
		_, err := c.Queue(queue).Push(ctx, lanes.Data(2))
		var apiErr *lanes.APIError
		require.ErrorAs(t, err, &apiErr, name)
		require.ErrorIs(t, err, lanes.ErrUnauthorized, name)
		require.Equal(t, "unauthorized", apiErr.Code, name)
		require.EqualValues(t, 1, via.requests.Load(), "%s: a 401 is not retried", name)
	}

	readOnly, via := client(hs256(t, secret, "read-only"))
	_, err = readOnly.Queue(queue).Push(ctx, lanes.Data(3))
	require.ErrorIs(t, err, lanes.ErrForbidden)
	require.False(t, errors.Is(err, lanes.ErrUnauthorized))
	require.EqualValues(t, 1, via.requests.Load(), "a 403 is not retried")

	for name, token := range map[string]string{"no token": "", "read-only token": hs256(t, secret, "read-only")} {
		c, via := client(token)
		cons, err := c.Queue(queue).Consume(ctx, func(context.Context, *lanes.Message) error { return nil })
		require.NoError(t, err)
		select {
		case <-cons.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the consumer kept polling a broker that refuses its token (%d requests)", name, via.requests.Load())
		}
		if token == "" {
			require.ErrorIs(t, cons.Err(), lanes.ErrUnauthorized, name)
		} else {
			require.ErrorIs(t, cons.Err(), lanes.ErrForbidden, name)
		}
		require.LessOrEqual(t, via.requests.Load(), int64(2), name)
	}
}

// WithBearerTokenFunc asks for the token before every attempt: each call carries the token the
// func returns then (the broker stamps its subject on the messages a push stores), and a func
// that fails fails the call with its error, sending nothing.
func TestITAuthTokenFunc(t *testing.T) {
	t.Parallel()
	url, secret := authBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	queue := fmt.Sprintf("sdkgo-authfunc-%d", time.Now().UnixNano())
	errNoToken := errors.New("identity provider unreachable")
	var asked atomic.Int32
	via := &countingTransport{}
	c, err := lanes.New(lanes.WithURL(url), lanes.WithHTTPClient(&http.Client{Transport: via}),
		lanes.WithBearerTokenFunc(func(context.Context) (string, error) {
			n := asked.Add(1)
			if n == 3 {
				return "", errNoToken
			}
			return hs256As(t, secret, "read-write", fmt.Sprintf("rotated-%d", n)), nil
		}))
	require.NoError(t, err)
	closeWhenDone(t, c)

	for i := 1; i <= 2; i++ {
		_, err := c.Queue(queue).Push(ctx, lanes.Data(i))
		require.NoError(t, err)
	}
	_, err = c.Queue(queue).Push(ctx, lanes.Data(3))
	require.ErrorIs(t, err, errNoToken)
	require.EqualValues(t, 2, via.requests.Load(), "a call whose token func failed sends nothing")

	msgs, err := c.Queue(queue).Wait(false).Batch(10).Pop(ctx)
	require.NoError(t, err)
	var subs []string
	for _, m := range msgs {
		require.NotNil(t, m.ProducerSub)
		subs = append(subs, *m.ProducerSub)
	}
	require.Equal(t, []string{"rotated-1", "rotated-2"}, subs)
}

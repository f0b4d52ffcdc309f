package ringlimit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/ringlimit/ringlimit/api"
	"github.com/ringlimit/ringlimit/check"
	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
)

// outcome is what a hostile request got, in a form a table can compare:
// kind is "grpc <code>" for a failed gRPC call, "item <status>" for the
// first item of a gRPC or HTTP answer, "http <code>" for an HTTP error,
// "closed" for a connection the server closed; msg is the error message.
type outcome struct{ kind, msg string }

func (o outcome) String() string { return fmt.Sprintf("%s %q", o.kind, o.msg) }

// grpcOutcome is the outcome of a gRPC Check.
func grpcOutcome(resp *ringlimitv1.CheckResponse, err error) outcome {
	if err != nil {
		s := status.Convert(err)
		return outcome{"grpc " + s.Code().String(), s.Message()}
	}
	r := resp.GetItems()[0]
	switch r.Status {
	case ringlimitv1.Status_STATUS_UNDER_LIMIT:
		return outcome{"item under_limit", ""}
	case ringlimitv1.Status_STATUS_OVER_LIMIT:
		if r.Remaining < 0 || r.Remaining > r.Limit {
			return outcome{"item over_limit", fmt.Sprintf("remaining %d out of [0, %d]", r.Remaining, r.Limit)}
		}
		return outcome{"item over_limit", ""}
	}
	return outcome{"item error", r.Error}
}

// httpOutcome is the outcome of an HTTP answer (code, body).
func httpOutcome(code int, body []byte) outcome {
	if code != http.StatusOK {
		var e api.JSONError
		if err := json.Unmarshal(body, &e); err != nil {
			e.Error = string(body)
		}
		return outcome{fmt.Sprintf("http %d", code), e.Error}
	}
	var resp api.JSONCheckResponse
	if err := json.Unmarshal(body, &resp); err != nil || len(resp.Items) == 0 {
		return outcome{"http 200", "undecodable answer: " + string(body)}
	}
	r := resp.Items[0]
	if r.Status == check.StatusOverLimit.String() && (r.Remaining < 0 || r.Remaining > r.Limit) {
		return outcome{"item over_limit", fmt.Sprintf("remaining %d out of [0, %d]", r.Remaining, r.Limit)}
	}
	return outcome{"item " + r.Status, r.Error}
}

// rawGRPC sends b as the body of a RateLimiter/Check call, as it is.
func rawGRPC(t *testing.T, addr string, b []byte) outcome {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	var out []byte
	err = cc.Invoke(t.Context(), ringlimitv1.RateLimiter_Check_FullMethodName, &b, &out, grpc.ForceCodec(rawCodec{}))
	if err != nil {
		return grpcOutcome(nil, err)
	}
	resp := &ringlimitv1.CheckResponse{}
	if err := proto.Unmarshal(out, resp); err != nil || len(resp.Items) == 0 {
		return outcome{"grpc OK", "undecodable answer"}
	}
	return grpcOutcome(resp, nil)
}

// marshalWith marshals req with the string placeholder replaced by bad, of
// the same length, so that the bytes can hold what a client would refuse to
// encode (invalid UTF-8).
func marshalWith(t *testing.T, req *ringlimitv1.CheckRequest, placeholder, bad string) []byte {
	t.Helper()
	if len(placeholder) != len(bad) {
		t.Fatalf("placeholder %q and replacement %q differ in length", placeholder, bad)
	}
	b, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Replace(b, []byte(placeholder), []byte(bad), 1)
}

// rawHTTP writes req (a whole HTTP/1.1 request) on a new connection and
// returns the status line of the answer, or "closed" with no answer.
func rawHTTP(t *testing.T, addr, req string) outcome {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, req); err != nil {
		return outcome{"closed", err.Error()}
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return outcome{"closed", err.Error()}
	}
	var code int
	if _, err := fmt.Sscanf(line, "HTTP/1.1 %d", &code); err != nil {
		return outcome{"closed", "status line " + line}
	}
	return outcome{fmt.Sprintf("http %d", code), strings.TrimSpace(line)}
}

// doHTTP sends a request with a method, headers and a body reader (a nil
// length means chunked) to n's /v1/check.
func doHTTP(t *testing.T, n *Node, method string, header http.Header, body io.Reader) outcome {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, "http://"+n.HTTPAddr()+"/v1/check", body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return outcome{"closed", err.Error()}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return httpOutcome(resp.StatusCode, b)
}

// slowSend opens a connection to addr, writes head at once, then trickles
// rest one byte every interval (a bounded loop: at most len(rest) writes)
// until the server closes the connection. It returns what the server
// answered, and how long after the connection it closed it (ok false if it
// never did while rest lasted and 5s after).
func slowSend(t *testing.T, addr string, head, rest []byte, interval time.Duration) (answer string, closedAfter time.Duration, ok bool) {
	t.Helper()
	start := time.Now()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	type result struct {
		b  []byte
		at time.Duration
	}
	done := make(chan result, 1)
	go func() {
		b, _ := io.ReadAll(conn) // until the server closes, or the deferred Close
		done <- result{b, time.Since(start)}
	}()
	if _, err := conn.Write(head); err != nil {
		r := <-done
		return string(r.b), r.at, true
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for _, c := range rest {
		select {
		case r := <-done:
			return string(r.b), r.at, true
		case <-tick.C:
		}
		if _, err := conn.Write([]byte{c}); err != nil {
			r := <-done
			return string(r.b), r.at, true
		}
	}
	select {
	case r := <-done:
		return string(r.b), r.at, true
	case <-time.After(5 * time.Second):
		conn.Close()
		<-done
		return "", 0, false
	}
}

// bystander makes ordinary checks through its own connection until stop,
// counting the calls and the failures: the node must keep serving others
// while it is attacked.
type bystander struct {
	calls, failures atomic.Int64
	lastErr         atomic.Value // string
	stop            chan struct{}
	done            chan struct{}
}

func startBystander(t *testing.T, n *Node) *bystander {
	t.Helper()
	client := dial(t, n)
	b := &bystander{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(b.done)
		for i := 0; i < 1_000_000; i++ { // bounded; stop ends it long before
			select {
			case <-b.stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			resp, err := client.Check(ctx, &ringlimitv1.CheckRequest{Items: []*ringlimitv1.CheckItem{
				item1("bystander", fmt.Sprint("k", i%100), 1_000_000, ringlimitv1.Mode_MODE_LOCAL)}})
			cancel()
			b.calls.Add(1)
			if err != nil || resp.Items[0].Status != ringlimitv1.Status_STATUS_UNDER_LIMIT {
				b.failures.Add(1)
				b.lastErr.Store(fmt.Sprint(resp, err))
			}
			select {
			case <-b.stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	return b
}

func (b *bystander) finish() (calls, failures int64, last string) {
	close(b.stop)
	<-b.done
	last, _ = b.lastErr.Load().(string)
	return b.calls.Load(), b.failures.Load(), last
}

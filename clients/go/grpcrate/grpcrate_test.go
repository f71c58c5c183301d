package grpcrate_test

import (
	"context"
	"net"
	"runtime"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/redisratelimit/ratelimit"
	"github.com/redisratelimit/ratelimit/grpcrate"
	"github.com/redisratelimit/ratelimit/internal/testserver"
	"github.com/redisratelimit/ratelimit/load"
)

// serve is gRPC's health service behind opts on a free loopback port, and a client of it.
func serve(t *testing.T, opts ...grpc.ServerOption) healthpb.HealthClient {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(server, health.NewServer())
	go func() { _ = server.Serve(listener) }()
	t.Cleanup(server.Stop)
	conn, err := grpc.NewClient(listener.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return healthpb.NewHealthClient(conn)
}

func retryDelay(err error) time.Duration {
	for _, detail := range status.Convert(err).Details() {
		if info, ok := detail.(*errdetails.RetryInfo); ok {
			return info.GetRetryDelay().AsDuration()
		}
	}
	return -1
}

func TestUnaryAndStreamCallsGetResourceExhaustedWithTheirRetryDelay(t *testing.T) {
	client, err := ratelimit.NewClient(testserver.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	limits := []ratelimit.Limiter{ratelimit.Throttle{Key: testserver.Unique("grpc") + ":", MaxBurst: 1, Count: 1, Period: time.Minute, Name: "calls"}}
	unary, err := grpcrate.UnaryServerInterceptor(client, limits, grpcrate.KeyByMetadata("x-api-key"))
	if err != nil {
		t.Fatal(err)
	}
	stream, err := grpcrate.StreamServerInterceptor(client, limits, grpcrate.KeyByMetadata("x-api-key"))
	if err != nil {
		t.Fatal(err)
	}
	health := serve(t, grpc.UnaryInterceptor(unary), grpc.StreamInterceptor(stream))
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", "alice")

	var header metadata.MD
	if _, err := health.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&header)); err != nil {
		t.Fatal(err)
	}
	if policy := header.Get("ratelimit-policy"); len(policy) != 1 || policy[0] != `"calls";q=2;w=120` {
		t.Fatalf("the fields in the header: %v", header)
	}
	watch, err := health.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watch.Recv(); err != nil {
		t.Fatalf("the second call, a stream, is admitted: %v", err)
	}
	_, err = health.Check(ctx, &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.ResourceExhausted || retryDelay(err) < 55*time.Second {
		t.Fatalf("the third: %v, retry %v", err, retryDelay(err))
	}
	refusedStream, err := health.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = refusedStream.Recv()
	}
	if status.Code(err) != codes.ResourceExhausted || retryDelay(err) < 55*time.Second {
		t.Fatalf("a stream refused: %v", err)
	}
	if _, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("no key, no limit: %v", err)
	}
}

func TestShedCallsGetUnavailableByPriority(t *testing.T) {
	rdb := testserver.Client(t)
	ctx := context.Background()
	service := testserver.Unique("grpc-load")
	if err := rdb.Do(ctx, "RL.LOAD.POLICY", service, "HOLD", "0", "LEVEL", "inflight", "5", "SHARES", "1", "1", "0", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Do(ctx, "RL.LOAD.REPORT", service, "hot", "60000", "inflight", "50").Err(); err != nil {
		t.Fatal(err)
	}
	client, err := ratelimit.NewClient(rdb)
	if err != nil {
		t.Fatal(err)
	}
	shedder, err := load.NewShedder(client, service, load.Manual())
	if err != nil {
		t.Fatal(err)
	}
	defer shedder.Close()
	if standing, err := shedder.Report(ctx); err != nil || standing.Level != 1 {
		t.Fatalf("report: %+v %v", standing, err)
	}
	health := serve(t, grpc.UnaryInterceptor(grpcrate.ShedUnary(shedder, nil)), grpc.StreamInterceptor(grpcrate.ShedStream(shedder, nil)))
	as := func(priority string) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "x-priority", priority)
	}
	_, err = health.Check(as("sheddable"), &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.Unavailable || retryDelay(err) != time.Second {
		t.Fatalf("sheddable: %v", err)
	}
	if _, err := health.Check(as("critical"), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("critical: %v", err)
	}
	watch, err := health.Watch(as("critical_plus"), &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = watch.Recv()
	}
	if err != nil {
		t.Fatalf("a critical_plus stream: %v", err)
	}
	shedStream, err := health.Watch(as("sheddable_plus"), &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = shedStream.Recv()
	}
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("a sheddable_plus stream: %v", err)
	}
}

// TestTheNoLoadLatencyHoldsOnAnIdleGRPCService: on one CPU, one call at a time, each burning a
// millisecond of CPU, over a dozen of the limit's epochs (shortened to 20 ms here): the no-load
// latency stays what a call takes. gRPC's transport has a goroutine runnable, not yet run, when
// a call's interceptor begins; counted as work ahead of the call, the no-load latency grew by a
// call's time every epoch.
func TestTheNoLoadLatencyHoldsOnAnIdleGRPCService(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	client, err := ratelimit.NewClient(testserver.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	options := load.DefaultLimitOptions
	options.EpochUs = 20_000
	shedder, err := load.NewShedder(client, testserver.Unique("grpc-idle"), load.Limit(options), load.Manual())
	if err != nil {
		t.Fatal(err)
	}
	defer shedder.Close()
	var work testserver.Burner
	burn := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		work.Burn(time.Millisecond)
		return handler(ctx, req)
	}
	health := serve(t, grpc.ChainUnaryInterceptor(grpcrate.ShedUnary(shedder, nil), burn))
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-priority", "critical")
	began := time.Now()
	for calls := 0; calls < 100 || time.Since(began) < 12*20*time.Millisecond; calls++ {
		if _, err := health.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("call %d: %v", calls, err)
		}
	}
	noload := time.Duration(shedder.Limit().Noload() * float64(time.Microsecond))
	if bound := 3 * work.Least(); noload > bound {
		t.Fatalf("the no-load latency is %v; the fastest call took %v (bound: three times that)", noload, work.Least())
	}
}

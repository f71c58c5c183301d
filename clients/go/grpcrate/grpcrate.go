// Package grpcrate is gRPC server interceptors for the module's limits and load shedding, unary
// and stream. A call its limits refuse fails with RESOURCE_EXHAUSTED, the wait in the status's
// details (google.rpc.RetryInfo, which gRPC's clients and Envoy read) and the IETF RateLimit
// fields in the response's header metadata; a call shed, or undecided while the server fails,
// fails with UNAVAILABLE and the same RetryInfo.
package grpcrate

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/redisratelimit/ratelimit"
	"github.com/redisratelimit/ratelimit/load"
)

// KeyFunc is what a call is limited by, appended to each limiter's Key; "" leaves it unlimited.
// fullMethod is "/package.Service/Method".
type KeyFunc func(ctx context.Context, fullMethod string) string

// KeyByPeer is the caller's address (its host).
func KeyByPeer(ctx context.Context, _ string) string {
	caller, ok := peer.FromContext(ctx)
	if !ok || caller.Addr == nil {
		return ""
	}
	host, _, err := net.SplitHostPort(caller.Addr.String())
	if err != nil {
		return caller.Addr.String()
	}
	return host
}

// KeyByMetadata is the call's metadata under name (an API key, a tenant); a call without it is
// not limited.
func KeyByMetadata(name string) KeyFunc {
	return func(ctx context.Context, _ string) string {
		values := metadata.ValueFromIncomingContext(ctx, strings.ToLower(name))
		if len(values) == 0 {
			return ""
		}
		return values[0]
	}
}

// withRetry is a status of code with message and the wait in a RetryInfo.
func withRetry(code codes.Code, message string, wait time.Duration) error {
	st := status.New(code, message)
	if wait >= 0 {
		if detailed, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(wait)}); err == nil {
			st = detailed
		}
	}
	return st.Err()
}

// limiter decides one call: nil to go on, or the status error to fail it with.
type limiter struct {
	client   *ratelimit.Client
	limiters []ratelimit.Limiter
	key      KeyFunc
}

func newLimiter(client *ratelimit.Client, limiters []ratelimit.Limiter, key KeyFunc) (*limiter, error) {
	if client == nil || key == nil {
		return nil, fmt.Errorf("%w: a client and a key function", ratelimit.ErrInvalid)
	}
	if err := ratelimit.Check(ratelimit.Keyed(limiters, "key")); err != nil {
		return nil, err
	}
	return &limiter{client: client, limiters: limiters, key: key}, nil
}

func (l *limiter) decide(ctx context.Context, fullMethod string) error {
	key := l.key(ctx, fullMethod)
	if key == "" {
		return nil
	}
	keyed := ratelimit.Keyed(l.limiters, key)
	result, err := l.client.Check(ctx, keyed)
	if err != nil {
		ratelimit.MarkOwn(ctx)
		var down *ratelimit.ServerUnavailableError
		if errors.As(err, &down) {
			return withRetry(codes.Unavailable, "the rate limiter is unavailable", down.RetryAfter)
		}
		return status.Error(codes.Internal, "the rate limiter failed")
	}
	if !result.Failed {
		header := metadata.MD{}
		for name, value := range ratelimit.Fields(result, keyed) {
			header.Set(name, value)
		}
		_ = grpc.SetHeader(ctx, header) // a stream's header may already be sent: the fields are extra
	}
	switch {
	case result.Allowed:
		return nil
	case result.Failed || result.ShedLevel > 0:
		ratelimit.MarkOwn(ctx)
		return withRetry(codes.Unavailable, "overloaded: try again later", result.RetryAfter)
	}
	return withRetry(codes.ResourceExhausted, "rate limit exceeded", result.RetryAfter)
}

// UnaryServerInterceptor checks each unary call against limiters (each Key a prefix of the
// call's key) in one decision on client.
func UnaryServerInterceptor(client *ratelimit.Client, limiters []ratelimit.Limiter, key KeyFunc) (grpc.UnaryServerInterceptor, error) {
	l, err := newLimiter(client, limiters, key)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := l.decide(ctx, info.FullMethod); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}, nil
}

// StreamServerInterceptor checks each stream, when it opens, against limiters in one decision on
// client.
func StreamServerInterceptor(client *ratelimit.Client, limiters []ratelimit.Limiter, key KeyFunc) (grpc.StreamServerInterceptor, error) {
	l, err := newLimiter(client, limiters, key)
	if err != nil {
		return nil, err
	}
	return func(srv any, stream grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := l.decide(stream.Context(), info.FullMethod); err != nil {
			return err
		}
		return handler(srv, stream)
	}, nil
}

// PriorityFunc is a call's priority class.
type PriorityFunc func(ctx context.Context, fullMethod string) ratelimit.Priority

// PriorityMetadata reads a call's priority from its metadata under name (critical_plus,
// critical, sheddable_plus, sheddable); one naming none, or another, is sheddable.
func PriorityMetadata(name string) PriorityFunc {
	return func(ctx context.Context, _ string) ratelimit.Priority {
		values := metadata.ValueFromIncomingContext(ctx, strings.ToLower(name))
		if len(values) == 0 {
			return ratelimit.Sheddable
		}
		return ratelimit.PriorityOr(values[0], ratelimit.Sheddable)
	}
}

// httpStatus is the HTTP status a call's code stands for, as gRPC's gateways map them: what the
// shedder counts (5xx fails, 429 is a limit's).
func httpStatus(err error) int {
	switch status.Code(err) {
	case codes.OK:
		return 200
	case codes.Canceled:
		return 499
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange:
		return 400
	case codes.Unauthenticated:
		return 401
	case codes.PermissionDenied:
		return 403
	case codes.NotFound:
		return 404
	case codes.AlreadyExists, codes.Aborted:
		return 409
	case codes.ResourceExhausted:
		return 429
	case codes.Unimplemented:
		return 501
	case codes.Unavailable:
		return 503
	case codes.DeadlineExceeded:
		return 504
	}
	return 500 // Unknown, Internal, DataLoss
}

// transportGoroutines is how many of gRPC's own goroutines are runnable, not yet run, when a
// call's interceptor begins (measured: one, with the client in another process), and are not
// work queued ahead of the call.
const transportGoroutines = 1

// shed admits a call or fails it with UNAVAILABLE; done reports how it ended.
func shed(ctx context.Context, shedder *load.Shedder, priority PriorityFunc, fullMethod string) (context.Context, func(error), error) {
	ticket, ok := shedder.AdmitBeside(priority(ctx, fullMethod), transportGoroutines)
	if !ok {
		return ctx, nil, withRetry(codes.Unavailable, "overloaded: try again later", shedder.RetryAfter())
	}
	ctx = ratelimit.WatchRequest(ctx, func(begins bool) { shedder.Waiting(ticket, begins) })
	return ctx, func(err error) {
		shedder.FinishedRoute(ticket, httpStatus(err), ratelimit.Answered(ctx), fullMethod)
	}, nil
}

// ShedUnary sheds unary calls by shedder, each call's class read by priority
// (PriorityMetadata("x-priority") when nil): UNAVAILABLE with RetryInfo (one interval) for a
// call shed.
func ShedUnary(shedder *load.Shedder, priority PriorityFunc) grpc.UnaryServerInterceptor {
	if priority == nil {
		priority = PriorityMetadata("x-priority")
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (reply any, err error) {
		ctx, done, refused := shed(ctx, shedder, priority, info.FullMethod)
		if refused != nil {
			return nil, refused
		}
		err = status.Error(codes.Internal, "panicked")
		defer func() { done(err) }()
		reply, err = handler(ctx, req)
		return reply, err
	}
}

// watched is a stream whose context carries the answered mark.
type watched struct {
	grpc.ServerStream
	ctx context.Context
}

func (w watched) Context() context.Context { return w.ctx }

// ShedStream sheds streams by shedder when they open, as ShedUnary.
func ShedStream(shedder *load.Shedder, priority PriorityFunc) grpc.StreamServerInterceptor {
	if priority == nil {
		priority = PriorityMetadata("x-priority")
	}
	return func(srv any, stream grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		ctx, done, refused := shed(stream.Context(), shedder, priority, info.FullMethod)
		if refused != nil {
			return refused
		}
		err = status.Error(codes.Internal, "panicked")
		defer func() { done(err) }()
		err = handler(srv, watched{ServerStream: stream, ctx: ctx})
		return err
	}
}

package grpcrate_test

import (
	"log"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"

	"github.com/redisratelimit/ratelimit"
	"github.com/redisratelimit/ratelimit/grpcrate"
	"github.com/redisratelimit/ratelimit/load"
)

func ExampleUnaryServerInterceptor() {
	client, err := ratelimit.NewClient(redis.NewClient(&redis.Options{Addr: "localhost:6379"}))
	if err != nil {
		log.Fatal(err)
	}
	limits := []ratelimit.Limiter{ratelimit.Throttle{Key: "rpc:", MaxBurst: 19, Count: 10, Period: time.Second}}
	unary, err := grpcrate.UnaryServerInterceptor(client, limits, grpcrate.KeyByMetadata("x-api-key"))
	if err != nil {
		log.Fatal(err)
	}
	stream, err := grpcrate.StreamServerInterceptor(client, limits, grpcrate.KeyByMetadata("x-api-key"))
	if err != nil {
		log.Fatal(err)
	}
	shedder, err := load.NewShedder(client, "load:orders")
	if err != nil {
		log.Fatal(err)
	}
	server := grpc.NewServer(
		grpc.ChainUnaryInterceptor(grpcrate.ShedUnary(shedder, nil), unary), // shed first: no call to the server
		grpc.ChainStreamInterceptor(grpcrate.ShedStream(shedder, nil), stream),
	)
	listener, err := net.Listen("tcp", ":50051")
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(server.Serve(listener))
}

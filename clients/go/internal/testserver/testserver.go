// Package testserver is the live server the tests run against (REDIS_URL, the module loaded:
// tests/clients.rs starts it), and a proxy in front of it that can freeze.
package testserver

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Options are the server's, from REDIS_URL; the test fails without it.
func Options(t testing.TB) *redis.Options {
	t.Helper()
	url := os.Getenv("REDIS_URL")
	if url == "" {
		t.Fatal("REDIS_URL names the server with the module (make test sets it)")
	}
	options, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("REDIS_URL: %v", err)
	}
	return options
}

// Client is a go-redis client on the server, closed when the test ends.
func Client(t testing.TB) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(Options(t))
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// Unique is a key of its own for one test.
func Unique(name string) string {
	bytes := make([]byte, 8)
	_, _ = rand.Read(bytes)
	return "go:" + name + ":" + hex.EncodeToString(bytes)
}

// FrozenProxy is a proxy in front of the server that can freeze: while frozen it reads nothing
// and sends nothing, as a stopped (SIGSTOP) or partitioned server looks to its clients; thawed,
// what waited goes through.
type FrozenProxy struct {
	listener net.Listener
	target   string
	mu       sync.Mutex
	frozen   bool
	thawed   *sync.Cond
	open     []net.Conn
}

// NewFrozenProxy listens on a free loopback port in front of the server; closed when the test
// ends.
func NewFrozenProxy(t testing.TB) *FrozenProxy {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &FrozenProxy{listener: listener, target: Options(t).Addr}
	p.thawed = sync.NewCond(&p.mu)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is where clients connect.
func (p *FrozenProxy) Addr() string { return p.listener.Addr().String() }

// Freeze stops every byte both ways until Thaw.
func (p *FrozenProxy) Freeze() {
	p.mu.Lock()
	p.frozen = true
	p.mu.Unlock()
}

// Thaw lets what waited through.
func (p *FrozenProxy) Thaw() {
	p.mu.Lock()
	p.frozen = false
	p.thawed.Broadcast()
	p.mu.Unlock()
}

// Close stops the proxy and its connections.
func (p *FrozenProxy) Close() {
	_ = p.listener.Close()
	p.Thaw()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, conn := range p.open {
		_ = conn.Close()
	}
}

func (p *FrozenProxy) accept() {
	for {
		client, err := p.listener.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.mu.Lock()
		p.open = append(p.open, client, server)
		p.mu.Unlock()
		go p.copy(server, client)
		go p.copy(client, server)
	}
}

// copy moves bytes from src to dst, each read waiting while frozen before it is sent.
func (p *FrozenProxy) copy(dst, src net.Conn) {
	defer func() { _ = dst.Close(); _ = src.Close() }()
	buffer := make([]byte, 32*1024)
	for {
		p.wait()
		n, err := src.Read(buffer)
		p.wait()
		if n > 0 {
			if _, werr := dst.Write(buffer[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *FrozenProxy) wait() {
	p.mu.Lock()
	for p.frozen {
		p.thawed.Wait()
	}
	p.mu.Unlock()
}

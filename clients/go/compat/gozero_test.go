package compat

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	zerolimit "github.com/zeromicro/go-zero/core/limit"
	zeroredis "github.com/zeromicro/go-zero/core/stores/redis"

	"github.com/redisratelimit/ratelimit/gozero/limit"
)

// zeroStore is go-zero's own Redis on the test's server.
func zeroStore(t testing.TB) *zeroredis.Redis {
	t.Helper()
	options := server(t).Options()
	store, err := zeroredis.NewRedis(zeroredis.RedisConf{Host: options.Addr, Type: zeroredis.NodeType})
	if err != nil {
		t.Fatal(err)
	}
	return store
}

// TestPeriodLimitAnswersAsGoZerosScript takes the same keys through go-zero's PeriodLimit (its
// Lua script) and the drop-in, both on go-zero's own Redis: the same answers, Allowed until
// HitQuota, then OverQuota; with Align too.
func TestPeriodLimitAnswersAsGoZerosScript(t *testing.T) {
	store := zeroStore(t)
	for _, align := range []bool{false, true} {
		prefix := unique("period") + ":"
		var theirOpts []zerolimit.PeriodOption
		var ourOpts []limit.PeriodOption
		if align {
			theirOpts, ourOpts = append(theirOpts, zerolimit.Align()), append(ourOpts, limit.Align())
		}
		theirs := zerolimit.NewPeriodLimit(86400, 5, store, prefix, theirOpts...)
		ours := limit.NewPeriodLimit(86400, 5, store, prefix, ourOpts...)
		for _, key := range []string{"a", "b"} {
			for take := range 8 {
				want, err1 := theirs.Take(key)
				got, err2 := ours.Take(key)
				if err1 != nil || err2 != nil || got != want {
					t.Fatalf("align %v, %s, take %d: go-zero %d (%v), the drop-in %d (%v)", align, key, take, want, err1, got, err2)
				}
			}
		}
	}
	zero := limit.NewPeriodLimit(60, 0, store, unique("zero"))
	if code, err := zero.Take("k"); code != limit.OverQuota || err != nil {
		t.Fatalf("a quota of 0 is over quota, as go-zero's: %d %v", code, err)
	}
}

// TestTokenLimiterAdmitsAsGoZerosScript takes a burst at once through go-zero's TokenLimiter
// and the drop-in: the burst, then nothing, each; go-zero's refills a whole second's tokens when
// the second on the caller's clock turns, so it may admit up to rate more for each second the
// calls spanned on the server's.
func TestTokenLimiterAdmitsAsGoZerosScript(t *testing.T) {
	rdb, store := server(t), zeroStore(t)
	key := unique("token")
	theirs := zerolimit.NewTokenLimiter(2, 10, store, key)
	ours := limit.NewTokenLimiter(2, 10, store, key)
	started := serverTime(t, rdb)
	var admittedTheirs, admittedOurs int
	for range 15 {
		if theirs.Allow() {
			admittedTheirs++
		}
		if ours.Allow() {
			admittedOurs++
		}
	}
	spanned := int(serverTime(t, rdb).Sub(started)/time.Second) + 1
	if admittedOurs < 10 || admittedOurs > 10+2*spanned || admittedTheirs < 10 || admittedTheirs > 10+2*spanned {
		t.Fatalf("of 15 at once with a burst of 10: go-zero admitted %d, the drop-in %d", admittedTheirs, admittedOurs)
	}
	// A burst below half the rate: go-zero's script sets a time to live of 0, fails, and decides
	// in the process; the drop-in decides on the server.
	narrow := limit.NewTokenLimiter(100, 10, store, unique("narrow"))
	admitted := 0
	for range 20 {
		if narrow.Allow() {
			admitted++
		}
	}
	if admitted < 10 || admitted > 10+100*spanned {
		t.Fatalf("a burst of 10 at 100 a second: %d of 20", admitted)
	}
}

// failing is go-zero's Redis, failing every call while down.
type failing struct {
	*zeroredis.Redis
	down atomic.Bool
}

func (f *failing) DoCtx(ctx context.Context, args ...any) (any, error) {
	if f.down.Load() {
		return nil, errors.New("dial tcp: connection refused")
	}
	return f.Redis.DoCtx(ctx, args...)
}

// TestTokenLimiterRescuesInTheProcessUntilAPingAnswers: while the server fails, the local
// limiter decides (its burst, then its rate); a ping every 100 ms finds the server back.
func TestTokenLimiterRescuesInTheProcessUntilAPingAnswers(t *testing.T) {
	store := &failing{Redis: zeroStore(t)}
	key := unique("rescue")
	limiter := limit.NewTokenLimiter(1, 3, store, key)
	store.down.Store(true)
	admitted := 0
	for range 6 {
		if limiter.Allow() {
			admitted++
		}
	}
	if admitted < 3 || admitted > 4 {
		t.Fatalf("the local limiter admits its burst of 3: %d of 6", admitted)
	}
	store.down.Store(false)
	// Back on the server (a fresh key there: its whole burst) once a ping answers.
	deadline := time.Now().Add(10 * time.Second)
	for {
		count := 0
		for range 3 {
			if limiter.Allow() {
				count++
			}
		}
		if count == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the limiter never went back to the server")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A deadline passed refuses, as go-zero's.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if limiter.AllowCtx(ctx) {
		t.Fatal("a cancelled call is refused")
	}
}

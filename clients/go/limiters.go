package ratelimit

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// A Limiter is one limit a request is checked against, named as the module's commands are:
// Throttle (CL.THROTTLE), Window (RL.WINDOW), Log (RL.LOG), and in RL.ALL only, Slots (LEASE)
// and Load (the load gate). A check of one limiter sends its own command; of several, one
// RL.ALL ... DETAILS, all or nothing (on a Cluster, give their keys one hash slot:
// "{user:7}:burst", "{user:7}:day").
type Limiter interface {
	// spec is the limiter's words, checked; an error for a bad field.
	spec() (spec, error)
}

type spec struct {
	key      string
	name     string
	command  string   // its own command, for a check of it alone
	inAll    string   // its keyword in RL.ALL
	args     []string // after the key (its own command) or the keyword (RL.ALL)
	keywords []string // after the options (its own command) or the arguments (RL.ALL)
	window   float64  // seconds: the policy's window in the HTTP fields
	rate     bool     // a rate limit (not the load gate): it has a policy in the fields
	slots    bool
	gate     bool
	capacity int64 // the most it admits at once (0: not a rate)
}

// ErrInvalid is what a bad argument's error wraps: checked before any call.
var ErrInvalid = errors.New("ratelimit: invalid argument")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// millis is d as whole milliseconds, at least 1.
func millis(d time.Duration) int64 {
	ms := int64(math.Round(float64(d) / float64(time.Millisecond)))
	if ms < 1 {
		return 1
	}
	return ms
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func checkKey(key string) error {
	if key == "" {
		return invalid("a limiter's key is a non-empty string")
	}
	return nil
}

func checkName(name string) error {
	if strings.ContainsRune(name, '"') {
		return invalid("a policy's name has no '\"': %q", name)
	}
	return nil
}

func positive(what string, d time.Duration) error {
	if d <= 0 {
		return invalid("%s is a positive duration, not %v", what, d)
	}
	return nil
}

func orName(name, fallback string) string {
	if name == "" {
		return fallback
	}
	return name
}

// Throttle is GCRA (CL.THROTTLE): Count per Period, evenly spaced, in bursts of MaxBurst + 1;
// with Warmup, a cold limiter reaches its rate over that much sustained use (Guava's
// SmoothWarmingUp). Name is the policy's name in the HTTP fields ("burst").
type Throttle struct {
	Key      string
	MaxBurst int64
	Count    int64
	Period   time.Duration
	Warmup   time.Duration
	Name     string
}

func (t Throttle) spec() (spec, error) {
	switch {
	case checkKey(t.Key) != nil:
		return spec{}, checkKey(t.Key)
	case t.MaxBurst < 0:
		return spec{}, invalid("max_burst is at least 0, not %d", t.MaxBurst)
	case t.Count < 1:
		return spec{}, invalid("count is at least 1, not %d", t.Count)
	case positive("period", t.Period) != nil:
		return spec{}, positive("period", t.Period)
	case t.Warmup < 0:
		return spec{}, invalid("warmup is 0 (none) or a positive duration, not %v", t.Warmup)
	case checkName(t.Name) != nil:
		return spec{}, checkName(t.Name)
	}
	var keywords []string
	if t.Warmup > 0 {
		keywords = []string{"WARMUP", itoa(millis(t.Warmup))}
	}
	return spec{
		key: t.Key, name: orName(t.Name, "burst"), command: "CL.THROTTLE", inAll: "THROTTLE",
		args:     []string{itoa(t.MaxBurst), itoa(t.Count), itoa(millis(t.Period))},
		keywords: keywords,
		window:   float64(t.MaxBurst+1) * t.Period.Seconds() / float64(t.Count),
		rate:     true, capacity: t.MaxBurst + 1,
	}, nil
}

// Algorithm is how a Window counts: Sliding (the default), Fixed, Anchored, or Buckets(n).
type Algorithm struct {
	word    string
	buckets int
}

var (
	// Sliding weighs the previous window by how much of it is still in the window.
	Sliding = Algorithm{word: "SLIDING"}
	// Fixed counts windows on the clock: up to twice the limit across a boundary.
	Fixed = Algorithm{word: "FIXED"}
	// Anchored counts windows that begin with a key's first request.
	Anchored = Algorithm{word: "ANCHORED"}
)

// Buckets counts the window in n buckets, each apart (Sentinel's LeapArray).
func Buckets(n int) Algorithm { return Algorithm{word: "BUCKETS", buckets: n} }

// ParseAlgorithm reads "SLIDING", "FIXED", "ANCHORED" or "BUCKETS n".
func ParseAlgorithm(words string) (Algorithm, error) {
	parts := strings.Fields(strings.ToUpper(words))
	switch {
	case len(parts) == 1 && parts[0] == "SLIDING":
		return Sliding, nil
	case len(parts) == 1 && parts[0] == "FIXED":
		return Fixed, nil
	case len(parts) == 1 && parts[0] == "ANCHORED":
		return Anchored, nil
	case len(parts) == 2 && parts[0] == "BUCKETS":
		n, err := strconv.Atoi(parts[1])
		if err != nil || n < 1 {
			return Algorithm{}, invalid("BUCKETS takes a count of at least 1: %q", words)
		}
		return Buckets(n), nil
	}
	return Algorithm{}, invalid("unknown window algorithm %q", words)
}

func (a Algorithm) words() ([]string, error) {
	switch {
	case a.word == "":
		return []string{"SLIDING"}, nil
	case a.word == "BUCKETS" && a.buckets < 1:
		return nil, invalid("BUCKETS takes a count of at least 1")
	case a.word == "BUCKETS":
		return []string{"BUCKETS", strconv.Itoa(a.buckets)}, nil
	}
	return []string{a.word}, nil
}

// Window is a window counter (RL.WINDOW): Limit per Window, by Algorithm (Sliding when unset).
type Window struct {
	Key       string
	Limit     int64
	Window    time.Duration
	Algorithm Algorithm
	Name      string
}

func (w Window) spec() (spec, error) {
	switch {
	case checkKey(w.Key) != nil:
		return spec{}, checkKey(w.Key)
	case w.Limit < 1:
		return spec{}, invalid("limit is at least 1, not %d", w.Limit)
	case positive("window", w.Window) != nil:
		return spec{}, positive("window", w.Window)
	case checkName(w.Name) != nil:
		return spec{}, checkName(w.Name)
	}
	keywords, err := w.Algorithm.words()
	if err != nil {
		return spec{}, err
	}
	return spec{
		key: w.Key, name: orName(w.Name, "window"), command: "RL.WINDOW", inAll: "WINDOW",
		args: []string{itoa(w.Limit), itoa(millis(w.Window))}, keywords: keywords,
		window: w.Window.Seconds(), rate: true, capacity: w.Limit,
	}, nil
}

// Log is the exact sliding log (RL.LOG): at most Limit in any Window.
type Log struct {
	Key    string
	Limit  int64
	Window time.Duration
	Name   string
}

func (l Log) spec() (spec, error) {
	switch {
	case checkKey(l.Key) != nil:
		return spec{}, checkKey(l.Key)
	case l.Limit < 1:
		return spec{}, invalid("limit is at least 1, not %d", l.Limit)
	case positive("window", l.Window) != nil:
		return spec{}, positive("window", l.Window)
	case checkName(l.Name) != nil:
		return spec{}, checkName(l.Name)
	}
	return spec{
		key: l.Key, name: orName(l.Name, "log"), command: "RL.LOG", inAll: "LOG",
		args: []string{itoa(l.Limit), itoa(millis(l.Window))}, window: l.Window.Seconds(),
		rate: true, capacity: l.Limit,
	}, nil
}

// Slots is a concurrency limit in RL.ALL (LEASE): at most Limit leases held at once on Key,
// each for Lease, taken only if every other limiter admits; Result.LeaseID releases or renews
// it.
type Slots struct {
	Key   string
	Limit int64
	Lease time.Duration
	Name  string
}

func (s Slots) spec() (spec, error) {
	switch {
	case checkKey(s.Key) != nil:
		return spec{}, checkKey(s.Key)
	case s.Limit < 1:
		return spec{}, invalid("limit is at least 1, not %d", s.Limit)
	case positive("lease", s.Lease) != nil:
		return spec{}, positive("lease", s.Lease)
	case checkName(s.Name) != nil:
		return spec{}, checkName(s.Name)
	}
	return spec{
		key: s.Key, name: orName(s.Name, "slots"), command: "RL.ALL", inAll: "LEASE",
		args: []string{itoa(s.Limit), itoa(millis(s.Lease))}, window: s.Lease.Seconds(),
		rate: true, slots: true,
	}, nil
}

// Load is the load gate of a service (LOAD priority in RL.ALL): Key is the service's, which
// its instances' reports fill; a request its level sheds is refused with nothing written
// (Result.ShedLevel).
type Load struct {
	Key      string
	Priority Priority
}

func (l Load) spec() (spec, error) {
	if err := checkKey(l.Key); err != nil {
		return spec{}, err
	}
	if !l.Priority.valid() {
		return spec{}, invalid("unknown priority %d", int(l.Priority))
	}
	return spec{
		key: l.Key, name: "load", command: "RL.ALL", inAll: "LOAD",
		args: []string{l.Priority.String()}, gate: true,
	}, nil
}

// Priority is a request's class, most important first (Google's criticality): what load
// shedding sheds from the bottom.
type Priority int

const (
	// CriticalPlus is what must never be shed: payments, health checks.
	CriticalPlus Priority = iota
	// Critical is the product's main requests.
	Critical
	// SheddablePlus is background work a user waits for.
	SheddablePlus
	// Sheddable is prefetch, batch, retries; what a request naming no class is.
	Sheddable
)

var priorityNames = [...]string{"critical_plus", "critical", "sheddable_plus", "sheddable"}

func (p Priority) valid() bool { return p >= CriticalPlus && p <= Sheddable }

// String is the class's wire name: critical_plus, critical, sheddable_plus, sheddable.
func (p Priority) String() string {
	if !p.valid() {
		return "Priority(" + strconv.Itoa(int(p)) + ")"
	}
	return priorityNames[p]
}

// ParsePriority reads a class's name (any case, spaces ignored); an error for another.
func ParsePriority(name string) (Priority, error) {
	wanted := strings.ToLower(strings.TrimSpace(name))
	for index, known := range priorityNames {
		if known == wanted {
			return Priority(index), nil
		}
	}
	return Sheddable, invalid("unknown priority %q: critical_plus, critical, sheddable_plus or sheddable", name)
}

// PriorityOr reads a class's name, or answers fallback for none or another (a header left out).
func PriorityOr(name string, fallback Priority) Priority {
	if priority, err := ParsePriority(name); err == nil {
		return priority
	}
	return fallback
}

// Keyed is limiters with key appended to each one's Key (its prefix: "api:" and "user:7" make
// "api:user:7"), the load gate's left as it is (its key is the service's): what the middleware
// checks for a request's key. On a Cluster, put the request's key in a hash tag ("{user:7}") for
// several limits in one decision.
func Keyed(limiters []Limiter, key string) []Limiter {
	keyed := make([]Limiter, len(limiters))
	for index, limiter := range limiters {
		switch l := limiter.(type) {
		case Throttle:
			l.Key += key
			keyed[index] = l
		case Window:
			l.Key += key
			keyed[index] = l
		case Log:
			l.Key += key
			keyed[index] = l
		case Slots:
			l.Key += key
			keyed[index] = l
		default:
			keyed[index] = limiter
		}
	}
	return keyed
}

// Check says what is wrong with limiters, if anything, before any call: what Command would
// refuse them for.
func Check(limiters []Limiter) error {
	_, _, err := prepare(limiters, nil)
	return err
}

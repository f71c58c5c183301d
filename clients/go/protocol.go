package ratelimit

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// An Option changes one request: Quantity, Refund, Block, Delay, AtMost, Force, ReadOnly
// (docs/options.md). At most one of Delay, AtMost and Force; none of them with Refund; Block
// with neither Delay nor Force: a combination the module refuses is refused before any call.
type Option func(*options)

type options struct {
	quantity int64
	refund   bool
	block    time.Duration
	delay    time.Duration
	hasDelay bool
	atMost   bool
	force    bool
	readOnly bool
	shadow   *bool
}

// Quantity is what the request weighs (1 unless given; 0 asks without taking).
func Quantity(n int64) Option { return func(o *options) { o.quantity = n } }

// Refund gives the quantity back instead of taking it.
func Refund() Option { return func(o *options) { o.refund = true } }

// Block keeps the key refused for d after a refusal (the penalty box).
func Block(d time.Duration) Option { return func(o *options) { o.block = d } }

// Delay lets a request that does not fit wait its turn, up to d (Result.Wait says how long).
func Delay(d time.Duration) Option {
	return func(o *options) { o.delay, o.hasDelay = d, true }
}

// AtMost takes what fits of the quantity, at least 1 (Result.Granted says how much).
func AtMost() Option { return func(o *options) { o.atMost = true } }

// Force takes it all, owing what does not fit.
func Force() Option { return func(o *options) { o.force = true } }

// ReadOnly answers without writing (the _RO variants).
func ReadOnly() Option { return func(o *options) { o.readOnly = true } }

// Shadow lets a refused request through, counted as "shadow" and logged, whatever the
// client's setting.
func Shadow(on bool) Option { return func(o *options) { o.shadow = &on } }

func buildOptions(given []Option) (options, error) {
	o := options{quantity: 1}
	for _, one := range given {
		if one != nil {
			one(&o)
		}
	}
	settles := 0
	for _, set := range []bool{o.hasDelay, o.atMost, o.force} {
		if set {
			settles++
		}
	}
	switch {
	case o.quantity < 0:
		return o, invalid("quantity is at least 0, not %d", o.quantity)
	case o.block < 0:
		return o, invalid("block is a positive duration, not %v", o.block)
	case o.hasDelay && o.delay < 0:
		return o, invalid("delay is 0 or more, not %v", o.delay)
	case settles > 1:
		return o, invalid("at most one of Delay, AtMost and Force")
	case o.refund && settles > 0:
		return o, invalid("Refund takes none of Delay, AtMost and Force")
	case o.block > 0 && (o.hasDelay || o.force):
		return o, invalid("Block takes neither Delay nor Force")
	}
	return o, nil
}

func (o options) words() []string {
	words := []string{itoa(o.quantity), "MS"}
	if o.block > 0 {
		words = append(words, "BLOCK", itoa(millis(o.block)))
	}
	if o.hasDelay {
		words = append(words, "DELAY", itoa(int64(math.Round(float64(o.delay)/float64(time.Millisecond)))))
	}
	if o.atMost {
		words = append(words, "AT_MOST")
	}
	if o.force {
		words = append(words, "FORCE")
	}
	if o.refund {
		words = append(words, "REFUND")
	}
	return words
}

func (o options) hasSixth() bool { return o.hasDelay || o.atMost }

// Command is the one command a request against limiters takes, with opts: the limiter's own,
// or RL.ALL with DETAILS. An error for no limiter or a bad one, before anything is sent.
func Command(limiters []Limiter, opts ...Option) ([]string, error) {
	specs, o, err := prepare(limiters, opts)
	if err != nil {
		return nil, err
	}
	return command(specs, o), nil
}

func prepare(limiters []Limiter, given []Option) ([]spec, options, error) {
	o, err := buildOptions(given)
	if err != nil {
		return nil, o, err
	}
	if len(limiters) == 0 {
		return nil, o, invalid("at least one limiter")
	}
	specs := make([]spec, len(limiters))
	for index, limiter := range limiters {
		if limiter == nil {
			return nil, o, invalid("limiter %d is nil", index)
		}
		if specs[index], err = limiter.spec(); err != nil {
			return nil, o, err
		}
	}
	return specs, o, nil
}

func command(specs []spec, o options) []string {
	suffix := ""
	if o.readOnly {
		suffix = "_RO"
	}
	onlyInAll := false
	for _, one := range specs {
		onlyInAll = onlyInAll || one.slots || one.gate
	}
	if len(specs) == 1 && !onlyInAll {
		one := specs[0]
		words := []string{one.command + suffix, one.key}
		words = append(words, one.args...)
		words = append(words, o.words()...)
		return append(words, one.keywords...)
	}
	words := []string{"RL.ALL" + suffix, strconv.Itoa(len(specs))}
	for _, one := range specs {
		words = append(words, one.key)
	}
	for _, one := range specs {
		words = append(words, one.inAll)
		words = append(words, one.args...)
		words = append(words, one.keywords...)
	}
	words = append(words, o.words()...)
	return append(words, "DETAILS")
}

// Result is what every limiter command answers, typed.
type Result struct {
	// Allowed: admitted (and counted); false: refused, and not counted.
	Allowed bool
	// Limit is the most admitted at once.
	Limit int64
	// Remaining is how much more would be admitted right now.
	Remaining int64
	// RetryAfter is how long until a refused request fits; -1 when admitted, or never.
	RetryAfter time.Duration
	// ResetAfter is how long until the limiter is back to full capacity.
	ResetAfter time.Duration
	// Wait (with Delay) is how long to wait before going ahead (0: at once, or refused).
	Wait time.Duration
	// Granted (with AtMost) is the quantity granted (0 when refused); -1 without AtMost.
	Granted int64
	// Failed: decided without the server, by the failure policy (nothing counted).
	Failed bool
	// Shadow: refused, but let through in shadow mode (Allowed is then true).
	Shadow bool
	// Each is each limiter's own result, in order, for several limiters (none for one).
	Each []Result
	// ShedLevel is the level that shed the request (with a Load gate; 0: not shed).
	ShedLevel int
	// LeaseID is the lease's id (with Slots; 0 when refused), to release or renew it.
	LeaseID int64
}

func integer(value any) (int64, error) {
	switch v := value.(type) {
	case int64:
		return v, nil
	case int:
		return int64(v), nil
	case string:
		return strconv.ParseInt(v, 10, 64)
	case []byte:
		return strconv.ParseInt(string(v), 10, 64)
	}
	return 0, fmt.Errorf("ratelimit: expected an integer, not %T %v", value, value)
}

func decimal(value any) (float64, error) {
	switch v := value.(type) {
	case string:
		return strconv.ParseFloat(v, 64)
	case []byte:
		return strconv.ParseFloat(string(v), 64)
	case float64:
		return v, nil
	}
	n, err := integer(value)
	return float64(n), err
}

func array(value any) ([]any, error) {
	if items, ok := value.([]any); ok {
		return items, nil
	}
	return nil, fmt.Errorf("ratelimit: expected an array reply, not %T %v", value, value)
}

func milliseconds(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }

// fromFields reads [limited, limit, remaining, retry_after, reset_after], times in ms.
func fromFields(fields []any) (Result, error) {
	if len(fields) < 5 {
		return Result{}, fmt.Errorf("ratelimit: a reply of %d values", len(fields))
	}
	var values [5]int64
	for index := range values {
		n, err := integer(fields[index])
		if err != nil {
			return Result{}, err
		}
		values[index] = n
	}
	retry := time.Duration(-1)
	if values[3] >= 0 {
		retry = milliseconds(values[3])
	}
	return Result{
		Allowed: values[0] == 0, Limit: values[1], Remaining: values[2], RetryAfter: retry,
		ResetAfter: milliseconds(values[4]), Granted: -1,
	}, nil
}

// ReadResult is the typed result of Command(limiters, opts...)'s reply: the five integers,
// the sixth (a wait, a quantity granted, a lease's id), then with a load gate the level that
// shed the request, then each limiter's own (DETAILS).
func ReadResult(reply any, limiters []Limiter, opts ...Option) (Result, error) {
	specs, o, err := prepare(limiters, opts)
	if err != nil {
		return Result{}, err
	}
	return readResult(reply, specs, o)
}

func readResult(reply any, specs []spec, o options) (Result, error) {
	values, err := array(reply)
	if err != nil {
		return Result{}, err
	}
	result, err := fromFields(values)
	if err != nil {
		return Result{}, err
	}
	slots, gate := false, false
	for _, one := range specs {
		slots, gate = slots || one.slots, gate || one.gate
	}
	next := 5
	if o.hasSixth() || slots {
		sixth, err := integer(values[5])
		if err != nil {
			return Result{}, err
		}
		if o.hasDelay {
			result.Wait = milliseconds(sixth)
		}
		if o.atMost {
			result.Granted = sixth
		}
		if slots {
			result.LeaseID = sixth
		}
		next = 6
	}
	if gate {
		level, err := integer(values[next])
		if err != nil {
			return Result{}, err
		}
		result.ShedLevel = int(level)
		next++
	}
	if len(specs) > 1 {
		for index, one := range specs {
			if one.gate || next+index >= len(values) {
				continue
			}
			fields, err := array(values[next+index])
			if err != nil {
				return Result{}, err
			}
			each, err := fromFields(fields)
			if err != nil {
				return Result{}, err
			}
			result.Each = append(result.Each, each)
		}
	}
	return result, nil
}

// seconds is whole seconds, rounded up: a client that waits this long is never early.
func seconds(d time.Duration) int64 {
	return int64(math.Ceil(d.Seconds() - 1e-9))
}

// Fields are the IETF RateLimit fields (draft-ietf-httpapi-ratelimit-headers-11) of result:
// RateLimit-Policy ("name";q=<limit>;w=<window s>), RateLimit ("name";r=<remaining>;t=<reset
// s>) and, when refused, Retry-After. Times round up to whole seconds.
func Fields(result Result, limiters []Limiter) map[string]string {
	each := result.Each
	if len(each) == 0 {
		each = []Result{result}
	}
	var policies, states []string
	index := 0
	for _, limiter := range limiters {
		one, err := limiter.spec()
		if err != nil || !one.rate {
			continue
		}
		if index >= len(each) {
			break
		}
		policies = append(policies, fmt.Sprintf("%q;q=%d;w=%d", one.name, each[index].Limit, int64(math.Ceil(one.window-1e-9))))
		states = append(states, fmt.Sprintf("%q;r=%d;t=%d", one.name, each[index].Remaining, seconds(each[index].ResetAfter)))
		index++
	}
	fields := map[string]string{
		"RateLimit-Policy": strings.Join(policies, ", "),
		"RateLimit":        strings.Join(states, ", "),
	}
	if !result.Allowed && result.RetryAfter >= 0 {
		fields["Retry-After"] = strconv.FormatInt(seconds(result.RetryAfter), 10)
	}
	return fields
}

// LeaseCommand is RL.ACQUIRE (or RL.ACQUIRE_RO with readOnly, which takes nothing).
func LeaseCommand(key string, limit int64, lease time.Duration, quantity int64, readOnly bool) ([]string, error) {
	switch {
	case checkKey(key) != nil:
		return nil, checkKey(key)
	case limit < 1:
		return nil, invalid("limit is at least 1, not %d", limit)
	case positive("lease", lease) != nil:
		return nil, positive("lease", lease)
	case quantity < 0:
		return nil, invalid("quantity is at least 0, not %d", quantity)
	}
	name := "RL.ACQUIRE"
	if readOnly {
		name = "RL.ACQUIRE_RO"
	}
	return []string{name, key, itoa(limit), itoa(millis(lease)), itoa(quantity), "MS"}, nil
}

// ReleaseCommand is RL.RELEASE: frees a held lease.
func ReleaseCommand(key string, id int64) ([]string, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	return []string{"RL.RELEASE", key, itoa(id)}, nil
}

// RenewCommand is RL.RENEW: extends a held lease to lease from now.
func RenewCommand(key string, id int64, lease time.Duration) ([]string, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	if err := positive("lease", lease); err != nil {
		return nil, err
	}
	return []string{"RL.RENEW", key, itoa(id), itoa(millis(lease)), "MS"}, nil
}

// Lease is RL.ACQUIRE's answer: the five fields, and the lease's id (0 when refused, or when
// the failure policy granted it without the server: nothing to release).
type Lease struct {
	Result
	ID int64
}

// ReadLease reads RL.ACQUIRE's reply.
func ReadLease(reply any) (Lease, error) {
	values, err := array(reply)
	if err != nil {
		return Lease{}, err
	}
	result, err := fromFields(values)
	if err != nil {
		return Lease{}, err
	}
	if len(values) < 6 {
		return Lease{}, fmt.Errorf("ratelimit: a lease's reply has 6 values")
	}
	id, err := integer(values[5])
	return Lease{Result: result, ID: id}, err
}

// ReportCommand is RL.LOAD.REPORT: an instance's factors, counting for ttl, in the order
// given by names (or sorted when nil).
func ReportCommand(key, instance string, ttl time.Duration, factors []Factor) []string {
	words := []string{"RL.LOAD.REPORT", key, instance, itoa(millis(ttl))}
	for _, factor := range factors {
		value := factor.Value
		if math.IsNaN(value) {
			value = 0
		}
		value = math.Min(math.Max(value, 0), 1e15)
		words = append(words, factor.Name, sixDigits(value))
	}
	return words
}

// Factor is one of a load report's factors: a name and a value.
type Factor struct {
	Name  string
	Value float64
}

// sixDigits is six significant digits, as C's %.6g and the other packages write them.
func sixDigits(value float64) string {
	return strconv.FormatFloat(value, 'g', 6, 64)
}

// Standing is a service's level and what it admits, as a report tells: the share of each
// priority class, most important first, from 0 to 1.
type Standing struct {
	Level     int
	Instances int
	Shares    [4]float64
}

// NothingShed is the standing before any report, and after the last one ended.
var NothingShed = Standing{Shares: [4]float64{1, 1, 1, 1}}

// Share is what the level admits of p.
func (s Standing) Share(p Priority) float64 {
	if !p.valid() {
		p = Sheddable
	}
	return s.Shares[p]
}

// ReadStanding reads RL.LOAD.REPORT's reply: [level, instances, share x 4].
func ReadStanding(reply any) (Standing, error) {
	values, err := array(reply)
	if err != nil {
		return Standing{}, err
	}
	if len(values) < 6 {
		return Standing{}, fmt.Errorf("ratelimit: a report's reply has 6 values")
	}
	level, err := integer(values[0])
	if err != nil {
		return Standing{}, err
	}
	instances, err := integer(values[1])
	if err != nil {
		return Standing{}, err
	}
	standing := Standing{Level: int(level), Instances: int(instances)}
	for index := range standing.Shares {
		if standing.Shares[index], err = decimal(values[2+index]); err != nil {
			return Standing{}, err
		}
	}
	return standing, nil
}

// Counts is what a window or a log counts (RL.WINDOW.COUNTS, RL.LOG.COUNTS): for a log,
// Count, OldestEndsIn and NewestEndsIn; for a FIXED, SLIDING or ANCHORED window, Previous,
// PreviousEndsIn, Current and CurrentEndsIn.
type Counts struct {
	Count        int64
	OldestEndsIn time.Duration
	NewestEndsIn time.Duration

	Previous       int64
	PreviousEndsIn time.Duration
	Current        int64
	CurrentEndsIn  time.Duration
}

// CountsCommand is RL.WINDOW.COUNTS or RL.LOG.COUNTS for a window (not BUCKETS) or a log.
func CountsCommand(limiter Limiter) ([]string, error) {
	switch l := limiter.(type) {
	case Log:
		if _, err := l.spec(); err != nil {
			return nil, err
		}
		return []string{"RL.LOG.COUNTS", l.Key, itoa(millis(l.Window)), "MS"}, nil
	case Window:
		one, err := l.spec()
		if err != nil {
			return nil, err
		}
		if l.Algorithm.word == "BUCKETS" {
			break
		}
		return []string{"RL.WINDOW.COUNTS", l.Key, itoa(millis(l.Window)), one.keywords[0], "MS"}, nil
	}
	return nil, invalid("counts are read from a FIXED, SLIDING or ANCHORED window, or a log")
}

// ReadCounts reads CountsCommand(limiter)'s reply.
func ReadCounts(limiter Limiter, reply any) (Counts, error) {
	values, err := array(reply)
	if err != nil {
		return Counts{}, err
	}
	numbers := make([]int64, len(values))
	for index, value := range values {
		if numbers[index], err = integer(value); err != nil {
			return Counts{}, err
		}
	}
	if _, isLog := limiter.(Log); isLog && len(numbers) >= 3 {
		return Counts{Count: numbers[0], OldestEndsIn: milliseconds(numbers[1]), NewestEndsIn: milliseconds(numbers[2])}, nil
	}
	if len(numbers) < 4 {
		return Counts{}, fmt.Errorf("ratelimit: a counts reply of %d values", len(numbers))
	}
	return Counts{
		Previous: numbers[0], PreviousEndsIn: milliseconds(numbers[1]),
		Current: numbers[2], CurrentEndsIn: milliseconds(numbers[3]),
	}, nil
}

// TopKey is one of RL.TOP's keys: refused Refusals times over the current and the previous
// minute, overcounted by at most Error.
type TopKey struct {
	Key      string
	Refusals int64
	Error    int64
}

// MergeTop merges RL.TOP's replies from every primary: a key lives on one primary, so its rows
// are summed only while a slot moves. Most refused first, ties by key.
func MergeTop(replies []any, count int) ([]TopKey, error) {
	merged := map[string]*TopKey{}
	for _, reply := range replies {
		rows, err := array(reply)
		if err != nil {
			return nil, err
		}
		for _, row := range rows {
			fields, err := array(row)
			if err != nil || len(fields) < 3 {
				return nil, fmt.Errorf("ratelimit: an RL.TOP row: %v", row)
			}
			key := fmt.Sprint(fields[0])
			if bytes, ok := fields[0].([]byte); ok {
				key = string(bytes)
			}
			refusals, err := integer(fields[1])
			if err != nil {
				return nil, err
			}
			errorBound, err := integer(fields[2])
			if err != nil {
				return nil, err
			}
			if merged[key] == nil {
				merged[key] = &TopKey{Key: key}
			}
			merged[key].Refusals += refusals
			merged[key].Error += errorBound
		}
	}
	rows := make([]TopKey, 0, len(merged))
	for _, row := range merged {
		rows = append(rows, *row)
	}
	sort.Slice(rows, func(a, b int) bool {
		if rows[a].Refusals != rows[b].Refusals {
			return rows[a].Refusals > rows[b].Refusals
		}
		return rows[a].Key < rows[b].Key
	})
	if len(rows) > count {
		rows = rows[:count]
	}
	return rows, nil
}

// AddCommands sets a shared list's item and increments the version, in one transaction.
func AddCommands(hash, listName, item, value string) [][]string {
	return [][]string{{"HSET", hash, listName + ":" + item, value}, {"HINCRBY", hash, "version", "1"}}
}

// RemoveCommands removes a shared list's item and increments the version, in one transaction.
func RemoveCommands(hash, listName, item string) [][]string {
	return [][]string{{"HDEL", hash, listName + ":" + item}, {"HINCRBY", hash, "version", "1"}}
}

// routingKey is the key a command routes by on a Cluster: after its name, or after RL.ALL's
// count; none for RL.TOP.
func routingKey(words []string) string {
	if len(words) < 2 {
		return ""
	}
	name := strings.ToUpper(words[0])
	switch {
	case strings.HasPrefix(name, "RL.ALL"):
		if len(words) > 2 {
			return words[2]
		}
		return ""
	case name == "RL.TOP":
		return ""
	}
	return words[1]
}

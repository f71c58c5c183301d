package ratelimit_test

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redisratelimit/ratelimit"
	"github.com/redisratelimit/ratelimit/load"
)

// clients/conformance.json, the table every package of the project is tested against: the words
// each limiter spec and option must produce, the result and HTTP fields each reply must give
// (calls whose limits change between them too), the leases', RL.TOP's, the shared lists', the
// load reports' and the counts' words and replies, and the local limit's traces, replayed
// exactly. Every part but lua, which the nginx package's test reads; a part added to the table
// fails here until it is read.

type object = map[string]any

func table(t *testing.T) object {
	t.Helper()
	data, err := os.ReadFile("../conformance.json")
	if err != nil {
		t.Fatal(err)
	}
	var parsed object
	if err := json.Unmarshal(data, &parsed); err != nil {
		t.Fatal(err)
	}
	return parsed
}

func list(value any) []any { return value.([]any) }

func seconds(value any) time.Duration {
	return time.Duration(math.Round(value.(float64) * 1e9))
}

func whole(value any) int64 { return int64(value.(float64)) }

func text(value any) string { return value.(string) }

func limiterOf(t *testing.T, spec object) ratelimit.Limiter {
	t.Helper()
	key := text(spec["key"])
	name, _ := spec["name"].(string)
	switch spec["kind"] {
	case "throttle":
		throttle := ratelimit.Throttle{
			Key: key, MaxBurst: whole(spec["max_burst"]), Count: whole(spec["count"]),
			Period: seconds(spec["period"]), Name: name,
		}
		if warmup, ok := spec["warmup"]; ok {
			throttle.Warmup = seconds(warmup)
		}
		return throttle
	case "window":
		window := ratelimit.Window{Key: key, Limit: whole(spec["limit"]), Window: seconds(spec["window"]), Name: name}
		if words, ok := spec["algorithm"].(string); ok {
			algorithm, err := ratelimit.ParseAlgorithm(words)
			if err != nil {
				t.Fatal(err)
			}
			window.Algorithm = algorithm
		}
		return window
	case "log":
		return ratelimit.Log{Key: key, Limit: whole(spec["limit"]), Window: seconds(spec["window"]), Name: name}
	case "load":
		priority := ratelimit.Sheddable
		if named, ok := spec["priority"].(string); ok {
			parsed, err := ratelimit.ParsePriority(named)
			if err != nil {
				t.Fatal(err)
			}
			priority = parsed
		}
		return ratelimit.Load{Key: key, Priority: priority}
	case "lease":
		return ratelimit.Slots{Key: key, Limit: whole(spec["limit"]), Lease: seconds(spec["lease"]), Name: name}
	}
	t.Fatalf("unknown kind in %v", spec)
	return nil
}

func limitersOf(t *testing.T, specs any) []ratelimit.Limiter {
	var out []ratelimit.Limiter
	for _, spec := range list(specs) {
		out = append(out, limiterOf(t, spec.(object)))
	}
	return out
}

func optionsOf(t *testing.T, spec any) []ratelimit.Option {
	t.Helper()
	var out []ratelimit.Option
	for name, value := range spec.(object) {
		switch name {
		case "quantity":
			out = append(out, ratelimit.Quantity(whole(value)))
		case "refund":
			if value.(bool) {
				out = append(out, ratelimit.Refund())
			}
		case "block":
			out = append(out, ratelimit.Block(seconds(value)))
		case "delay":
			out = append(out, ratelimit.Delay(seconds(value)))
		case "at_most":
			if value.(bool) {
				out = append(out, ratelimit.AtMost())
			}
		case "force":
			if value.(bool) {
				out = append(out, ratelimit.Force())
			}
		case "read_only":
			if value.(bool) {
				out = append(out, ratelimit.ReadOnly())
			}
		default:
			t.Fatalf("unknown option %s", name)
		}
	}
	return out
}

func words(value any) []string {
	var out []string
	for _, word := range list(value) {
		if s, ok := word.(string); ok {
			out = append(out, s)
		} else {
			out = append(out, fmt.Sprint(word))
		}
	}
	return out
}

// reply is a value as go-redis gives it: integers as int64, strings as string, arrays as []any.
func reply(value any) any {
	switch v := value.(type) {
	case []any:
		out := make([]any, len(v))
		for index, one := range v {
			out[index] = reply(one)
		}
		return out
	case float64:
		return int64(v)
	}
	return value
}

func secondsOrNil(d time.Duration) any {
	if d < 0 {
		return nil
	}
	return d.Seconds()
}

func TestEveryPartOfTheTableIsRead(t *testing.T) {
	read := []string{
		"about", "changed_limits", "commands", "concurrency", "counts", "lease_replies", "leases",
		"lists", "load", "load_replies", "lua", "replies", "top",
	}
	var parts []string
	for part := range table(t) {
		parts = append(parts, part)
	}
	sort.Strings(parts)
	if !reflect.DeepEqual(parts, read) {
		t.Fatalf("the table's parts are %v; this test reads %v", parts, read)
	}
	if about := text(table(t)["about"]); !strings.Contains(about, "lua") {
		t.Fatalf("about names which package reads which part: %q", about)
	}
	// lua is the nginx package's own API, which tests/nginx.rs reads.
	if _, ok := table(t)["lua"].(object)["commands"]; !ok {
		t.Fatal("lua has its commands")
	}
}

func checkWords(t *testing.T, one object) {
	t.Helper()
	got, err := ratelimit.Command(limitersOf(t, one["limiters"]), optionsOf(t, one["options"])...)
	if err != nil {
		t.Fatalf("%v: %v", one, err)
	}
	if want := words(one["words"]); !reflect.DeepEqual(got, want) {
		t.Fatalf("%v: words %q, want %q", one["limiters"], got, want)
	}
}

func resultFields(result ratelimit.Result) object {
	granted := any(nil)
	if result.Granted >= 0 {
		granted = float64(result.Granted)
	}
	return object{
		"allowed": result.Allowed, "limit": float64(result.Limit), "remaining": float64(result.Remaining),
		"retry_after": secondsOrNil(result.RetryAfter), "reset_after": result.ResetAfter.Seconds(),
		"wait": result.Wait.Seconds(), "granted": granted, "shed_level": float64(result.ShedLevel),
		"lease_id": float64(result.LeaseID),
	}
}

func checkReply(t *testing.T, one object) {
	t.Helper()
	limiters := limitersOf(t, one["limiters"])
	got, err := ratelimit.ReadResult(reply(one["reply"]), limiters, optionsOf(t, one["options"])...)
	if err != nil {
		t.Fatalf("%v: %v", one, err)
	}
	want := one["result"].(object)
	read := resultFields(got)
	for name, value := range want {
		if name == "each" {
			continue
		}
		if !reflect.DeepEqual(read[name], value) {
			t.Fatalf("%v: %s is %v, want %v", one["reply"], name, read[name], value)
		}
	}
	each := list(want["each"])
	if len(each) != len(got.Each) {
		t.Fatalf("%v: %d results of each limiter, want %d", one["reply"], len(got.Each), len(each))
	}
	for index, wanted := range each {
		read := resultFields(got.Each[index])
		for name, value := range wanted.(object) {
			if !reflect.DeepEqual(read[name], value) {
				t.Fatalf("%v: limiter %d's %s is %v, want %v", one["reply"], index, name, read[name], value)
			}
		}
	}
	fields := map[string]string{}
	for name, value := range one["fields"].(object) {
		fields[name] = text(value)
	}
	if headers := ratelimit.Fields(got, limiters); !reflect.DeepEqual(headers, fields) {
		t.Fatalf("%v: fields %v, want %v", one["reply"], headers, fields)
	}
}

func TestEverySpecBuildsItsWords(t *testing.T) {
	for _, one := range list(table(t)["commands"]) {
		checkWords(t, one.(object))
	}
}

func TestEveryReplyGivesItsResultAndFields(t *testing.T) {
	for _, one := range list(table(t)["replies"]) {
		checkReply(t, one.(object))
	}
}

func TestCallsWhoseLimitsChangeSendThemAndReadTheirReplies(t *testing.T) {
	for _, one := range list(table(t)["changed_limits"]) {
		for _, step := range list(one.(object)["steps"]) {
			checkWords(t, step.(object))
			checkReply(t, step.(object))
		}
	}
}

func TestLeasesBuildTheirWordsAndReadTheirReplies(t *testing.T) {
	for _, each := range list(table(t)["leases"]) {
		one := each.(object)
		key := text(one["key"])
		var got []string
		var err error
		switch one["call"] {
		case "acquire", "peek":
			got, err = ratelimit.LeaseCommand(key, whole(one["limit"]), seconds(one["lease"]), whole(one["quantity"]), one["call"] == "peek")
		case "release":
			got, err = ratelimit.ReleaseCommand(key, whole(one["id"]))
		default:
			got, err = ratelimit.RenewCommand(key, whole(one["id"]), seconds(one["lease"]))
		}
		if err != nil || !reflect.DeepEqual(got, words(one["words"])) {
			t.Fatalf("%v: %q, %v", one, got, err)
		}
	}
	for _, each := range list(table(t)["lease_replies"]) {
		one := each.(object)
		lease, err := ratelimit.ReadLease(reply(one["reply"]))
		if err != nil {
			t.Fatal(err)
		}
		got := object{
			"allowed": lease.Allowed, "id": float64(lease.ID), "remaining": float64(lease.Remaining),
			"retry_after": secondsOrNil(lease.RetryAfter),
		}
		for name, value := range got {
			if !reflect.DeepEqual(one[name], value) {
				t.Fatalf("%v: %s is %v", one, name, value)
			}
		}
	}
}

func TestTopMergesEveryPrimary(t *testing.T) {
	for _, each := range list(table(t)["top"]) {
		one := each.(object)
		rows, err := ratelimit.MergeTop(reply(one["replies"]).([]any), int(whole(one["count"])))
		if err != nil {
			t.Fatal(err)
		}
		got := []any{}
		for _, row := range rows {
			got = append(got, []any{row.Key, row.Refusals, row.Error})
		}
		if want := reply(one["rows"]); !reflect.DeepEqual(got, want) {
			t.Fatalf("rows %v, want %v", got, want)
		}
	}
}

func TestTheListsChangeInOneTransaction(t *testing.T) {
	for _, each := range list(table(t)["lists"]) {
		one := each.(object)
		hash, name, item := text(one["hash"]), text(one["list"]), text(one["item"])
		var got [][]string
		if one["change"] == "add" {
			got = ratelimit.AddCommands(hash, name, item, text(one["value"]))
		} else {
			got = ratelimit.RemoveCommands(hash, name, item)
		}
		var want [][]string
		for _, command := range list(one["commands"]) {
			want = append(want, words(command))
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q, want %q", got, want)
		}
	}
}

func TestLoadReportsBuildTheirWordsAndReadTheirReplies(t *testing.T) {
	for _, each := range list(table(t)["load"]) {
		one := each.(object)
		var factors []ratelimit.Factor
		for _, pair := range list(one["factors"]) {
			factors = append(factors, ratelimit.Factor{Name: text(list(pair)[0]), Value: list(pair)[1].(float64)})
		}
		got := ratelimit.ReportCommand(text(one["service"]), text(one["instance"]), seconds(one["ttl"]), factors)
		if want := words(one["words"]); !reflect.DeepEqual(got, want) {
			t.Fatalf("%q, want %q", got, want)
		}
	}
	for _, each := range list(table(t)["load_replies"]) {
		one := each.(object)
		standing, err := ratelimit.ReadStanding(reply(one["reply"]))
		if err != nil {
			t.Fatal(err)
		}
		var shares []any
		for _, share := range standing.Shares {
			shares = append(shares, share)
		}
		if float64(standing.Level) != one["level"] || float64(standing.Instances) != one["instances"] ||
			!reflect.DeepEqual(shares, one["shares"]) {
			t.Fatalf("%+v, want %v", standing, one)
		}
	}
}

func TestCountsBuildTheirWordsAndReadTheirReplies(t *testing.T) {
	for _, each := range list(table(t)["counts"]) {
		one := each.(object)
		limiter := limiterOf(t, one["limiter"].(object))
		got, err := ratelimit.CountsCommand(limiter)
		if err != nil || !reflect.DeepEqual(got, words(one["words"])) {
			t.Fatalf("%q, %v", got, err)
		}
		counts, err := ratelimit.ReadCounts(limiter, reply(one["reply"]))
		if err != nil {
			t.Fatal(err)
		}
		read := object{}
		if _, isLog := limiter.(ratelimit.Log); isLog {
			read["count"] = float64(counts.Count)
			read["oldest_ends_in"] = counts.OldestEndsIn.Seconds()
			read["newest_ends_in"] = counts.NewestEndsIn.Seconds()
		} else {
			read["previous"] = float64(counts.Previous)
			read["previous_ends_in"] = counts.PreviousEndsIn.Seconds()
			read["current"] = float64(counts.Current)
			read["current_ends_in"] = counts.CurrentEndsIn.Seconds()
		}
		if !reflect.DeepEqual(read, one["counts"]) {
			t.Fatalf("%v, want %v", read, one["counts"])
		}
	}
}

// limitOptions is base with the table's options over it.
func limitOptions(spec object, base load.LimitOptions) load.LimitOptions {
	number := func(name string, fallback float64) float64 {
		if value, ok := spec[name].(float64); ok {
			return value
		}
		return fallback
	}
	o := base
	o.Initial, o.Floor, o.Ceiling = number("initial", o.Initial), number("floor", o.Floor), number("ceiling", o.Ceiling)
	o.IntervalUs = int64(number("interval_us", float64(o.IntervalUs)))
	o.TargetUs = int64(number("target_us", float64(o.TargetUs)))
	o.Enter = int(number("enter", float64(o.Enter)))
	o.Deep = number("deep", o.Deep)
	o.EpochUs = int64(number("epoch_us", float64(o.EpochUs)))
	o.Decay = number("decay", o.Decay)
	o.Sojourn = number("sojourn", o.Sojourn)
	if shares, ok := spec["shares"].([]any); ok {
		for index := range o.Shares {
			o.Shares[index] = shares[index].(float64)
		}
	}
	return o
}

func TestTheLocalLimitReplaysEveryTrace(t *testing.T) {
	part := table(t)["concurrency"].(object)
	if shipped := limitOptions(part["defaults"].(object), load.DefaultLimitOptions); shipped != load.DefaultLimitOptions {
		t.Fatalf("the table's defaults are %+v, the package ships %+v", shipped, load.DefaultLimitOptions)
	}
	for _, each := range list(part["traces"]) {
		trace := each.(object)
		limit, err := load.NewConcurrencyLimit(limitOptions(trace["options"].(object), load.DefaultLimitOptions))
		if err != nil {
			t.Fatal(err)
		}
		expect := list(trace["expect"])
		for step, raw := range list(trace["events"]) {
			event := list(raw)
			at := whole(event[0])
			var decision any
			switch event[1] {
			case "admit":
				priority, err := ratelimit.ParsePriority(text(event[2]))
				if err != nil {
					t.Fatal(err)
				}
				backlog := int64(0)
				if len(event) > 3 {
					backlog = whole(event[3])
				}
				decision = limit.Admit(priority, at, backlog)
			case "leave":
				limit.Leave(at)
			case "back":
				limit.Back(at)
			case "level":
				limit.ShedByLevel(at)
			default:
				var route *string
				if len(event) > 3 && event[3] != nil {
					named := event[3].(string)
					route = &named
				}
				backlog := int64(0)
				if len(event) > 4 {
					backlog = whole(event[4])
				}
				limit.FinishBehind(route, whole(event[2]), at, backlog)
			}
			wanted := list(expect[step])
			where := fmt.Sprintf("%s, step %d: %v", trace["name"], step, event)
			if !reflect.DeepEqual(decision, wanted[0]) {
				t.Fatalf("%s: admitted %v, want %v", where, decision, wanted[0])
			}
			if limit.Limit() != wanted[1].(float64) || limit.Congested() != wanted[2].(bool) {
				t.Fatalf("%s: limit %v congested %v, want %v", where, limit.Limit(), limit.Congested(), wanted[1:])
			}
		}
	}
}

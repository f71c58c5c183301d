package ratelimit

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// SharedLists are allow and deny lists shared by every gateway and application through one
// hash: fields "<list>:<item>" and a "version" every change increments (the nginx package's
// resty.ratelimit_module.lists reads and writes the same hash). A reader keeps a copy and asks
// only for the version, at most once per every, reading the hash again when it changed. A change
// increments the version after writing its item, in one transaction, so a reader that saw the
// new version reads the new item.
type SharedLists struct {
	client    *Client
	hash      string
	every     time.Duration
	mu        sync.Mutex
	lists     map[string]map[string]string
	version   string
	read      bool
	nextCheck time.Time
}

// NewSharedLists reads and writes the lists of hash, checking its version at most once per
// every.
func NewSharedLists(client *Client, hash string, every time.Duration) (*SharedLists, error) {
	if err := checkKey(hash); err != nil {
		return nil, err
	}
	if every <= 0 {
		return nil, invalid("every is a positive duration, not %v", every)
	}
	return &SharedLists{client: client, hash: hash, every: every, lists: map[string]map[string]string{}}, nil
}

func (s *SharedLists) transaction(ctx context.Context, commands [][]string) error {
	ctx, cancel := context.WithTimeout(ctx, s.client.timeout)
	defer cancel()
	_, err := s.client.within(ctx, func(ctx context.Context) (any, error) {
		return s.client.rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
			for _, words := range commands {
				pipe.Do(ctx, args(words)...)
			}
			return nil
		})
	})
	return err
}

// Add sets item of list to value and increments the version, in one transaction.
func (s *SharedLists) Add(ctx context.Context, list, item, value string) error {
	return s.transaction(ctx, AddCommands(s.hash, list, item, value))
}

// Remove removes item from list and increments the version, in one transaction.
func (s *SharedLists) Remove(ctx context.Context, list, item string) error {
	return s.transaction(ctx, RemoveCommands(s.hash, list, item))
}

// Read is the lists, list -> item -> value: the copy, checked against the version at most
// once per every.
func (s *SharedLists) Read(ctx context.Context) (map[string]map[string]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.client.now()
	if s.read && now.Before(s.nextCheck) {
		return s.lists, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.client.timeout)
	defer cancel()
	read, err := s.client.within(ctx, func(ctx context.Context) (any, error) {
		return s.client.rdb.HGet(ctx, s.hash, "version").Result()
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return s.lists, err
	}
	version, _ := read.(string)
	if !s.read || version != s.version {
		read, err := s.client.within(ctx, func(ctx context.Context) (any, error) {
			return s.client.rdb.HGetAll(ctx, s.hash).Result()
		})
		if err != nil {
			return s.lists, err
		}
		all, _ := read.(map[string]string)
		lists := map[string]map[string]string{}
		for field, value := range all {
			name, item, found := strings.Cut(field, ":")
			if !found {
				continue
			}
			if lists[name] == nil {
				lists[name] = map[string]string{}
			}
			lists[name][item] = value
		}
		s.lists, s.version, s.read = lists, version, true
	}
	s.nextCheck = now.Add(s.every)
	return s.lists, nil
}

// Contains says whether item is on list.
func (s *SharedLists) Contains(ctx context.Context, list, item string) (bool, error) {
	lists, err := s.Read(ctx)
	_, found := lists[list][item]
	return found, err
}

package io.github.redisratelimit;

/**
 * One of {@code RL.TOP}'s keys: refused {@code refusals} times over the current and the previous
 * minute, overcounted by at most {@code error}.
 */
public record TopKey(String key, long refusals, long error) {}

-- lease_purge — delete up to `limit` holdings expired at now_ms, soonest expired first, ties by
-- lease key then token (includes/lease.lua), and drop the clocks of keys long idle.
--
-- KEYS[1] hold-expiry (zset member <lease key> NUL <token, 19 digits>, scored by expires_at_ms)
-- KEYS[2] hold-clock (zset member <lease key>, scored by its clock)
-- ARGV[1] now_ms (a holding with expires_at_ms <= now_ms is expired)   ARGV[2] limit
-- ARGV[3] the latest clock a purge at now_ms may drop (now_ms - LEASE_CLOCK_KEEP_MS)
-- First the clocks: the first `limit` at or before ARGV[3] by (clock, key bytes) are examined,
-- and each whose key holds nothing (no hold:<key> left) is dropped: the key starts again from
-- its next caller's time. Then the holdings: the index's head is the purge order (equal scores
-- order by member bytes: the lease key's UTF-8, which is code-point order, then the
-- zero-padded token). Each holding taken goes from its lease key's hold and holder keys, named
-- here from the hash tag and the lease key the member carries: which keys a purge touches is
-- known only once it has read the index (they are in the prefix's one slot, as the waiters'
-- queue keys a finish names). A lease key left with no holding leaves no key behind but its
-- clock (its zset and hash go with their last member), moved to the latest end deleted of it
-- (never back): a caller behind must not find the room those holdings left. Atomic: several
-- callers at once delete each holding once. O(limit log n).
-- Returns the number of holdings deleted.
--!include row.lua
--!include lease.lua

local tag = string.match(KEYS[1], "^(%{[^{}]*%}):")
local limit = tonumber(ARGV[2])
local idle = redis.call("ZRANGEBYSCORE", KEYS[2], "-inf", ARGV[3], "LIMIT", 0, limit)
for _, key in ipairs(idle) do
  if redis.call("EXISTS", tag .. ":hold:" .. key) == 0 then
    redis.call("ZREM", KEYS[2], key)
  end
end
local gone = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", ARGV[1], "WITHSCORES", "LIMIT", 0, limit)
local ended = {}
for i = 1, #gone / 2 do
  local member = gone[2 * i - 1]
  -- The token is the member's last 19 bytes, after the NUL that ends the lease key.
  local key = string.sub(member, 1, #member - 20)
  local token = string.match(string.sub(member, -19), "^0*(%d+)$")
  drop_named(tag .. ":hold:" .. key, tag .. ":holder:" .. key, token)
  -- Soonest expired first: a key's last holding taken here ends latest.
  ended[key] = gone[2 * i]
end
for key, ends in pairs(ended) do
  local clock = redis.call("ZSCORE", KEYS[2], key)
  if not clock or tonumber(clock) < tonumber(ends) then
    redis.call("ZADD", KEYS[2], ends, key)
  end
end
-- What was read is the index's head: one rank range removes it (no unpack of 10,000 members).
if #gone > 0 then
  redis.call("ZREMRANGEBYRANK", KEYS[1], 0, #gone / 2 - 1)
end
return #gone / 2

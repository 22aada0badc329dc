-- counter_fold — fold old minute buckets into hour buckets, then drop expired hour buckets; one
-- atomic step, so several workers folding at once fold each minute bucket once.
--
-- KEYS[1] counter (hash, includes/account.lua)   KEYS[2] counter:minute   KEYS[3] counter:hour
-- ARGV[1] fold_before(now_ms)   ARGV[2] drop_before(now_ms)   ARGV[3] limit
-- Minute buckets starting before ARGV[1] go first, oldest (bucket_ms, name, queue) first (the
-- zset's order: score, then member bytes), each added into its hour bucket (created if absent);
-- with budget left, hour buckets starting before ARGV[2] are deleted, in the same order.
-- O(limit) commands, whatever the number of buckets.
-- Returns how many buckets were folded plus dropped.
--!include row.lua

local HOUR = 3600000
local limit = tonumber(ARGV[3])

local minutes = redis.call("ZRANGEBYSCORE", KEYS[2], "-inf", "(" .. ARGV[1], "LIMIT", 0, limit)
for _, member in ipairs(minutes) do
  local bucket = tonumber(string.sub(member, 1, 13))
  local h = fmt(bucket - bucket % HOUR)
  local hour = string.rep("0", 13 - #h) .. h .. string.sub(member, 14)
  local fields = {}
  for k = 1, 9 do
    fields[k] = "m" .. member .. Z .. k
  end
  local counts = redis.call("HMGET", KEYS[1], unpack(fields))
  for k = 1, 9 do
    if counts[k] then
      redis.call("HINCRBY", KEYS[1], "h" .. hour .. Z .. k, counts[k])
    end
  end
  redis.call("HDEL", KEYS[1], unpack(fields))
  redis.call("ZADD", KEYS[3], "NX", h, hour)
  redis.call("ZREM", KEYS[2], member)
end

local dropped = 0
local left = limit - #minutes
if left > 0 then
  local hours = redis.call("ZRANGEBYSCORE", KEYS[3], "-inf", "(" .. ARGV[2], "LIMIT", 0, left)
  for _, member in ipairs(hours) do
    local fields = {}
    for k = 1, 9 do
      fields[k] = "h" .. member .. Z .. k
    end
    redis.call("HDEL", KEYS[1], unpack(fields))
    redis.call("ZREM", KEYS[3], member)
  end
  dropped = #hours
end
return #minutes + dropped

-- lease_holders — the live holdings of one lease key (read only; includes/lease.lua).
--
-- KEYS[1] hold:<key>   KEYS[2] holder:<key>   KEYS[3] hold-clock
-- ARGV[1] now_ms   ARGV[2] the lease key (its member in hold-clock)
-- Returns flat, three per live holding (expires_at_ms > the key's time: the later of now_ms
-- and the key's clock, includes/lease.lua), in expiry order (the caller sorts by token): token,
-- expires_at_ms, holder NUL stamp. Expired holdings are skipped, not deleted, and the clock
-- stays: a read writes nothing.
--!include row.lua

local at = tonumber(ARGV[1])
local clock = redis.call("ZSCORE", KEYS[3], ARGV[2])
if clock and tonumber(clock) > at then
  at = tonumber(clock)
end
local live = redis.call("ZRANGEBYSCORE", KEYS[1], "(" .. fmt(at), "+inf", "WITHSCORES")
local out = {}
-- HMGET in slices: unpack's arguments live on Lua's C stack.
for s = 1, #live / 2, 500 do
  local tokens = {}
  for j = s, math.min(s + 499, #live / 2) do
    tokens[#tokens + 1] = live[2 * j - 1]
  end
  local rows = redis.call("HMGET", KEYS[2], unpack(tokens))
  for j = 1, #tokens do
    out[#out + 1] = tokens[j]
    out[#out + 1] = fmt(tonumber(live[2 * (s + j - 1)]))
    out[#out + 1] = rows[j]
  end
end
return out

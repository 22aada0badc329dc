-- migrate_leases — index lease holdings stored before `hold-expiry` existed (`ujobs db upgrade`,
-- the lease half of `migrate`); idempotent (includes/lease.lua).
--
-- KEYS[1 .. #KEYS - 1] hold:<key> zsets (a page of a SCAN, read outside the script)
-- KEYS[#KEYS] hold-expiry
-- Each zset is read here, atomically with its write: a holding dropped or renewed since the
-- page was read is indexed as it is now (or not at all), so the index never names a missing
-- holding nor a stale end.
-- Returns how many holdings were not in the index yet.
--!include row.lua
--!include lease.lua

local added = 0
for i = 1, #KEYS - 1 do
  local key = string.match(KEYS[i], "^%{[^{}]*%}:hold:(.*)$")
  local held = redis.call("ZRANGE", KEYS[i], 0, -1, "WITHSCORES")
  for j = 1, #held, 2 do
    added = added + redis.call("ZADD", KEYS[#KEYS], held[j + 1], expiry_member(key, held[j]))
  end
end
return added

-- queue_demand — per asked queue, the `ready` rows due by now_ms; a paused queue answers 0.
--
-- KEYS[1] pause:queue
-- KEYS[2q] due:<queue q>, KEYS[2q + 1] parked:<queue q>, for q = 1..m in ARGV order
-- ARGV[1] now_ms   ARGV[2 .. m+1] the queue names
-- due:<queue> holds ready rows and parked rows with a time; parked:<queue> holds the latter
-- alone, so each priority window [p*2^42, p*2^42 + now] counts due minus parked.
-- Returns one integer per queue, in ARGV order.
--!include row.lua

local now = tonumber(ARGV[1])
local out = {}
for q = 1, #ARGV - 1 do
  local due_key, parked_key = KEYS[2 * q], KEYS[2 * q + 1]
  local count = 0
  if redis.call("SISMEMBER", KEYS[1], ARGV[q + 1]) == 0 then
    local first = redis.call("ZRANGE", due_key, 0, 0, "WITHSCORES")
    if #first > 0 then
      local p = math.floor(tonumber(first[2]) / B)
      while p do
        local lo, hi = fmt(p * B), fmt(p * B + now)
        count = count
          + redis.call("ZCOUNT", due_key, lo, hi)
          - redis.call("ZCOUNT", parked_key, lo, hi)
        local nxt = redis.call("ZRANGEBYSCORE", due_key, fmt((p + 1) * B), "+inf", "WITHSCORES", "LIMIT", 0, 1)
        p = nil
        if #nxt > 0 then
          p = math.floor(tonumber(nxt[2]) / B)
        end
      end
    end
  end
  out[q] = count
end
return out

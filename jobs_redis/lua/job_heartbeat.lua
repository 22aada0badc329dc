-- job_heartbeat — extend each held lease to now_ms + lease_ms; fenced per item.
--
-- KEYS[1] job:state   KEYS[2] job:lease
-- ARGV[4(i-1) + 1 ..] per item i: id, claims, worker, the new lease end (now_ms + lease_ms)
-- A lapsed lease does not break the fence: only a new claim does.
-- Returns one string, a character per item: "1" landed, "0" the fence no longer held.
--!include row.lua

local out = {}
local n = #ARGV / 4
for i = 1, n do
  local b = 4 * (i - 1)
  local id = ARGV[b + 1]
  local t = held(KEYS[1], id, ARGV[b + 2], ARGV[b + 3])
  if t then
    t[5] = ARGV[b + 4]
    redis.call("HSET", KEYS[1], id, join(t))
    redis.call("ZADD", KEYS[2], ARGV[b + 4], id)
    out[i] = "1"
  else
    out[i] = "0"
  end
end
return table.concat(out)

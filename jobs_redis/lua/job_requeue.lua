-- job_requeue — make a finished row ready now with fresh attempts, in one write.
--
-- KEYS[1] job:state   KEYS[2] job:live   KEYS[3] due:<the row's queue>
-- KEYS[4..7] finished:cancelled, finished:completed, finished:dead, finished:failed
-- ARGV[1] id   ARGV[2] now_ms   ARGV[3] the row's queue (as the caller read it; checked)
-- Returns {"ok"}, {"not_found"}, {"not_requeueable"} (the row is live) or
-- {"duplicate", holder id} (another live row holds the namespace); an error when ARGV[3] is
-- not the row's queue. The run id, claims, results and progress stay.
--!include row.lua

local id, now = ARGV[1], ARGV[2]
local raw = redis.call("HGET", KEYS[1], id)
if not raw then
  return { "not_found" }
end
local t = split(raw)
if t[10] ~= ARGV[3] then
  return redis.error_reply("ERR job_requeue: the caller named the wrong queue")
end
if is_live(t[1]) then
  return { "not_requeueable" }
end
local ns = ns_of(t)
local holder = redis.call("HGET", KEYS[2], ns)
if holder then
  return { "duplicate", holder }
end
local FINISHED = { cancelled = 4, completed = 5, dead = 6, failed = 7 }
redis.call("ZREM", KEYS[FINISHED[t[1]]], id)
t[1] = "ready"
t[4] = "0"
t[5] = ""
t[6] = now
t[7] = ""
redis.call("HSET", KEYS[1], id, join(t))
redis.call("HSET", KEYS[2], ns, id)
redis.call("ZADD", KEYS[3], score_of(t[8], now), id)
return { "ok" }

-- job_cancel — cancel a live row (ready, running or parked); a finished row is left alone.
--
-- KEYS[1] job:state   KEYS[2] job:live   KEYS[3] lease:<the row's queue>
-- KEYS[4] due:<the row's queue>   KEYS[5] parked:<the row's queue>
-- KEYS[6] finished:cancelled (zset id by finished_at_ms, read by job_purge)
-- KEYS[7] wait   KEYS[8] wait:index (includes/durable.lua: a cancelled parked row's wait goes)
-- ARGV[1] id   ARGV[2] now_ms   ARGV[3] the row's queue (as the caller read it; checked)
-- Returns "cancelled", "finished" or "not_found"; an error when ARGV[3] is not the row's queue.
--!include row.lua
--!include match.lua
--!include durable.lua

local id = ARGV[1]
local raw = redis.call("HGET", KEYS[1], id)
if not raw then
  return "not_found"
end
local t = split(raw)
if t[10] ~= ARGV[3] then
  return redis.error_reply("ERR job_cancel: the caller named the wrong queue")
end
if not is_live(t[1]) then
  return "finished"
end
t[1] = "cancelled"
t[5] = ""
t[7] = ARGV[2]
redis.call("HSET", KEYS[1], id, join(t))
redis.call("ZREM", KEYS[3], id)
redis.call("ZREM", KEYS[4], id)
redis.call("ZREM", KEYS[5], id)
redis.call("HDEL", KEYS[2], ns_of(t))
redis.call("ZADD", KEYS[6], ARGV[2], id)
drop_wait(id)
return "cancelled"

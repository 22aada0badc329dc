-- job_cancel_many — cancel each live row (ready, running or parked), in order; a finished row
-- is left alone. Not fenced: an operator's call (a running row's worker learns it at its next
-- heartbeat, which misses).
--
-- KEYS[1] job:state   KEYS[2] job:live   KEYS[3] finished:cancelled (zset id by finished_at_ms)
-- KEYS[1 + 3q] lease:<queue q>, KEYS[2 + 3q] due:<queue q>, KEYS[3 + 3q] parked:<queue q>
-- then wait, wait:index (includes/durable.lua: a cancelled parked row's wait goes), and
--   join:waiters, join:pending (includes/flows.lua: a cancel finishes the row), and
--   job:claimed, job:attempts (includes/attempts.lua: a running row's claim ends cancelled)
-- KEYS[#KEYS - 5 .. #KEYS] the accounting keys (includes/account.lua): each cancel moves its
--   `cancelled` counter and its queue's cancelled count
-- ARGV: includes/bulk.lua (ARGV[1] now_ms)
-- Returns "stale" (nothing written) when a row's queue is not the one named, else one string, a
-- character per id: "c" cancelled, "f" finished (nothing written), "n" not found.
--!include row.lua
--!include match.lua
--!include durable.lua
--!include account.lua
--!include bulk.lua
--!include flows.lua
--!include attempts.lua

acc_open(#KEYS - 5)
local now = ARGV[1]
local out = bulk_answers(KEYS[1], function(id, t, q)
  if not is_live(t[1]) then
    return "f"
  end
  local flags = flow_flags(t)
  if t[1] == "running" then
    attempt_end(id, t, now, '"outcome":"cancelled"')
  end
  t[1] = "cancelled"
  t[5] = ""
  t[7] = now
  redis.call("HSET", KEYS[1], id, join(t))
  redis.call("ZREM", KEYS[1 + 3 * q], id)
  redis.call("ZREM", KEYS[2 + 3 * q], id)
  redis.call("ZREM", KEYS[3 + 3 * q], id)
  redis.call("HDEL", KEYS[2], ns_of(t))
  redis.call("ZADD", KEYS[3], now, id)
  count_settle(t, now, "cancelled")
  count_rows(id, t[10], "cancelled", 1)
  drop_wait(id)
  flow_finished(id, flags, false, now)
  return "c"
end)
acc_close()
return out

-- job_remove — delete each row that is not running, in order, exactly as job_purge deletes a
-- row: every hash field and index entry of the id goes, so the id and its live namespace are
-- free again. No counter moves.
--
-- KEYS[1] job:state   KEYS[2] job:error   KEYS[3] job:progress   KEYS[4] job:result
-- KEYS[5] job:live
-- KEYS[6..9] finished:cancelled, finished:completed, finished:dead, finished:failed
-- KEYS[8 + 2q] due:<queue q>, KEYS[9 + 2q] parked:<queue q>
-- then wait, wait:index, step:out, step:index (includes/durable.lua: a removed row's wait and
--   its run's steps go with it), join:waiters, join:pending (includes/flows.lua: its join
--   edges go, and a removed live row is a finish that did not complete; its waiters released
--   at their own created_at_ms, this call taking no clock), job:claimed, job:attempts
--   (includes/attempts.lua: its history goes with it)
-- KEYS[#KEYS - 5 .. #KEYS] the accounting keys (includes/account.lua; its job:data is the row's
--   data hash): a removed row leaves job:created and its queue's counts
-- ARGV: includes/bulk.lua (ARGV[1] unused)
-- Returns "stale" (nothing written) when a row's queue is not the one named, else one string, a
-- character per id: "x" removed, "r" running (nothing written), "n" not found (a second mention
-- of a removed id included).
--!include row.lua
--!include match.lua
--!include durable.lua
--!include account.lua
--!include bulk.lua
--!include flows.lua
--!include attempts.lua

acc_open(#KEYS - 5)
local FINISHED = { cancelled = 6, completed = 7, dead = 8, failed = 9 }
local out = bulk_answers(KEYS[1], function(id, t, q)
  if t[1] == "running" then
    return "r"
  end
  local flags = nil
  if is_live(t[1]) then
    flags = flow_flags(t)
    redis.call("HDEL", KEYS[5], ns_of(t))
    redis.call("ZREM", KEYS[8 + 2 * q], id)
    redis.call("ZREM", KEYS[9 + 2 * q], id)
  else
    redis.call("ZREM", KEYS[FINISHED[t[1]]], id)
  end
  count_gone(id, t, redis.call("HGET", ACC.data, id))
  drop_row(ACC.data, id)
  for k = 1, 4 do
    redis.call("HDEL", KEYS[k], id)
  end
  if (t[14] or "") ~= "" then
    flow_drop(id)
  end
  flow_finished(id, flags, false, nil)
  redis.call("HDEL", ACC.data, id)
  attempt_drop({ id })
  return "x"
end)
acc_close()
return out

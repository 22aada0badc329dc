-- job_requeue_many — make each finished row ready now with fresh attempts, in order; one write
-- per row. The run id, claims, claimed_by, last error, result and progress stay.
--
-- KEYS[1] job:state   KEYS[2] job:live
-- KEYS[3..6] finished:cancelled, finished:completed, finished:dead, finished:failed
-- KEYS[6 + q] due:<queue q>
-- KEYS[#KEYS - 5 .. #KEYS] the accounting keys (includes/account.lua): a requeued row leaves its
--   queue's count of its final state (no counter moves: a requeue settles nothing)
-- ARGV: includes/bulk.lua (ARGV[1] now_ms)
-- Returns "stale" (nothing written) when a row's queue is not the one named, else one string, a
-- character per id: "r" requeued, "n" not found, "l" live, "d" another live row holds its
-- namespace (a row requeued earlier in this call included).
--!include row.lua
--!include account.lua
--!include bulk.lua

acc_open(#KEYS - 5)
local FINISHED = { cancelled = 3, completed = 4, dead = 5, failed = 6 }
local now = ARGV[1]
local out = bulk_answers(KEYS[1], function(id, t, q)
  local ns = ns_of(t)
  if is_live(t[1]) then
    return "l"
  elseif redis.call("HEXISTS", KEYS[2], ns) == 1 then
    return "d"
  end
  redis.call("ZREM", KEYS[FINISHED[t[1]]], id)
  count_rows(id, t[10], t[1], -1)
  t[1] = "ready"
  t[4] = "0"
  t[5] = ""
  t[6] = now
  t[7] = ""
  redis.call("HSET", KEYS[1], id, join(t))
  redis.call("HSET", KEYS[2], ns, id)
  redis.call("ZADD", KEYS[6 + q], score_of(t[8], now), id)
  return "r"
end)
acc_close()
return out

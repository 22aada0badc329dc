-- job_requeue_many — make each finished row ready now with fresh attempts, in order; one write
-- per row. Claims, claimed_by, last error, result and progress stay; the run id stays, or, for
-- a fresh requeue, becomes the item's fresh run id.
--
-- KEYS[1] job:state   KEYS[2] job:live
-- KEYS[3..6] finished:cancelled, finished:completed, finished:dead, finished:failed
-- KEYS[6 + q] due:<queue q>
-- then step:out, step:index (includes/durable.lua: the saga mark is read there, and a fresh
--   requeue drops the steps of the run it left)
-- KEYS[#KEYS - 5 .. #KEYS] the accounting keys (includes/account.lua; its job:data holds the
--   row's run id, rewritten by a fresh requeue): a requeued row leaves its queue's count of its
--   final state (no counter moves: a requeue settles nothing)
-- ARGV: includes/bulk.lua (ARGV[1] now_ms), then its extras: the saga mark's step name
--   (jobs_core.semantics.SAGA_STEP), then one fresh run id per item ("" for a plain requeue)
-- A row is unwound when it is dead or failed and its run holds the saga mark: a plain requeue
-- refuses it; a fresh requeue takes it and leaves its run's steps (its unwind job, holding that
-- run id, reads them). Any other fresh requeue drops the steps of the run it leaves.
-- Returns "stale" (nothing written) when a row's queue is not the one named, else one string, a
-- character per id: "r" requeued, "n" not found, "l" live, "u" unwound (a plain requeue), "d"
-- another live row holds its namespace (a row requeued earlier in this call included).
--!include row.lua
--!include match.lua
--!include durable.lua
--!include account.lua
--!include bulk.lua

acc_open(#KEYS - 5)
local FINISHED = { cancelled = 3, completed = 4, dead = 5, failed = 6 }
local UNWOUND = { dead = true, failed = true }
local now = ARGV[1]
local extras = bulk_extras()
local saga = extras[1]
local out = bulk_answers(KEYS[1], function(id, t, q, i)
  if is_live(t[1]) then
    return "l"
  end
  local fresh = extras[1 + i]
  local data = split(redis.call("HGET", ACC.data, id))
  local unwound = UNWOUND[t[1]]
    and redis.call("HEXISTS", durable_keys().step_out, data[1] .. Z .. saga) == 1
  local ns = ns_of(t)
  if unwound and fresh == "" then
    return "u"
  elseif redis.call("HEXISTS", KEYS[2], ns) == 1 then
    return "d"
  end
  if fresh ~= "" then
    if not unwound then
      drop_steps(data[1])
    end
    data[1] = fresh
    redis.call("HSET", ACC.data, id, table.concat(data, Z))
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

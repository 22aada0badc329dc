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
local ids, qs = bulk_items(KEYS[1])
if not ids then
  return "stale"
end
local FINISHED = { cancelled = 3, completed = 4, dead = 5, failed = 6 }
local now = ARGV[1]
local out = {}
for i, id in ipairs(ids) do
  local raw = redis.call("HGET", KEYS[1], id)
  if not raw then
    out[i] = "n"
  else
    local t = split(raw)
    local ns = ns_of(t)
    if is_live(t[1]) then
      out[i] = "l"
    elseif redis.call("HEXISTS", KEYS[2], ns) == 1 then
      out[i] = "d"
    else
      redis.call("ZREM", KEYS[FINISHED[t[1]]], id)
      count_rows(id, t[10], t[1], -1)
      t[1] = "ready"
      t[4] = "0"
      t[5] = ""
      t[6] = now
      t[7] = ""
      redis.call("HSET", KEYS[1], id, join(t))
      redis.call("HSET", KEYS[2], ns, id)
      redis.call("ZADD", KEYS[6 + qs[i]], score_of(t[8], now), id)
      out[i] = "r"
    end
  end
end
acc_close()
return table.concat(out)

-- migrate — index rows that predate an index (`ujobs db upgrade`); idempotent.
--
-- KEYS[1] job:state
-- KEYS[2..5] finished:cancelled, finished:completed, finished:dead, finished:failed
-- KEYS[6..11] the accounting keys (includes/account.lua)
-- ARGV[1] "1" on the call that ends the scan (it may carry no ids), else "0"
-- ARGV[2..n] ids (a page of an HSCAN of job:state, read outside the script)
-- Each row is read here, atomically with its write: a row revived or purged since the page was
-- read is left alone, so an index never names a live or missing row.
-- - finished rows go into their finished:<state> zset (schema 1: what job_purge reads);
-- - every row goes into job:created, and the one call that adds it there counts it in its
--   queue's total (and final state) — so a row is counted once, however often this runs, and
--   settles by this version move a row's counts only once it is in job:created (account.lua).
-- The call ending the scan marks the schema "2": from then on every script counts every row.
-- Returns how many rows were added to an index.
--!include row.lua
--!include account.lua

acc_open(6)
local FINISHED = { cancelled = 2, completed = 3, dead = 4, failed = 5 }
local added = 0
for i = 2, #ARGV do
  local id = ARGV[i]
  local raw = redis.call("HGET", KEYS[1], id)
  if raw then
    local t = split(raw)
    local k = FINISHED[t[1]]
    if k and t[7] ~= "" then
      added = added + redis.call("ZADD", KEYS[k], "NX", t[7], id)
    end
    local data = redis.call("HGET", ACC.data, id)
    if data and redis.call("ZADD", ACC.created, "NX", 0, created_member(data, id)) == 1 then
      added = added + 1
      row_delta(t[10], "total", 1)
      if k then
        row_delta(t[10], t[1], 1)
      end
    end
  end
end
acc_close()
if ARGV[1] == "1" then
  redis.call("SET", ACC.schema, "2")
end
return added

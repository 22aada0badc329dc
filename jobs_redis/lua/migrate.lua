-- migrate — index finished rows that predate the finished index (`ujobs db upgrade`); idempotent.
--
-- KEYS[1] job:state
-- KEYS[2..5] finished:cancelled, finished:completed, finished:dead, finished:failed
-- ARGV[1..n] ids (a page of an HSCAN of job:state, read outside the script)
-- Each row is read here, atomically with its write: a row revived or purged since the page was
-- read is left alone, so the index never names a live or missing row.
-- Returns how many rows were added to an index.
--!include row.lua

local FINISHED = { cancelled = 2, completed = 3, dead = 4, failed = 5 }
local added = 0
for i = 1, #ARGV do
  local raw = redis.call("HGET", KEYS[1], ARGV[i])
  if raw then
    local t = split(raw)
    local k = FINISHED[t[1]]
    if k and t[7] ~= "" then
      added = added + redis.call("ZADD", KEYS[k], "NX", t[7], ARGV[i])
    end
  end
end
return added

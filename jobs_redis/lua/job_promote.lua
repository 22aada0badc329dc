-- job_promote — make each delayed `ready` row due now, in order; nothing else changes.
--
-- KEYS[1] job:state   KEYS[1 + q] due:<queue q>
-- ARGV: includes/bulk.lua (ARGV[1] now_ms)
-- Returns "stale" (nothing written) when a row's queue is not the one named, else one string, a
-- character per id: "p" promoted, "a" ready and already due, "x" not ready (running, parked or
-- finished), "n" not found. Only "p" writes.
--!include row.lua
--!include bulk.lua

local now = ARGV[1]
return bulk_answers(KEYS[1], function(id, t, q)
  if t[1] ~= "ready" or t[6] == "" then
    return "x"
  elseif tonumber(t[6]) <= tonumber(now) then
    return "a"
  end
  t[6] = now
  redis.call("HSET", KEYS[1], id, join(t))
  redis.call("ZADD", KEYS[1 + q], score_of(t[8], now), id)
  return "p"
end)

-- job_promote — make each delayed `ready` row due now, in order; nothing else changes.
--
-- KEYS[1] job:state   KEYS[1 + q] due:<queue q>
-- ARGV: includes/bulk.lua (ARGV[1] now_ms)
-- Returns "stale" (nothing written) when a row's queue is not the one named, else one string, a
-- character per id: "p" promoted, "a" ready and already due, "x" not ready (running, parked or
-- finished), "n" not found. Only "p" writes.
--!include row.lua
--!include bulk.lua

local ids, qs = bulk_items(KEYS[1])
if not ids then
  return "stale"
end
local now = ARGV[1]
local out = {}
for i, id in ipairs(ids) do
  local raw = redis.call("HGET", KEYS[1], id)
  if not raw then
    out[i] = "n"
  else
    local t = split(raw)
    if t[1] ~= "ready" or t[6] == "" then
      out[i] = "x"
    elseif tonumber(t[6]) <= tonumber(now) then
      out[i] = "a"
    else
      t[6] = now
      redis.call("HSET", KEYS[1], id, join(t))
      redis.call("ZADD", KEYS[1 + qs[i]], score_of(t[8], now), id)
      out[i] = "p"
    end
  end
end
return table.concat(out)

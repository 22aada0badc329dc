-- job_ack — complete each held job; each item is fenced by its own claims and worker.
--
-- KEYS[1] job:state   KEYS[2] job:live   KEYS[3] job:lease   KEYS[4] job:result
-- KEYS[5] job:progress
-- ARGV[6(i-1) + 1 ..] per item i: id, claims, worker, now_ms, result_json, progress_json
--   ("" for an absent JSON value: JSON text is never empty). An absent result clears the
--   stored one; an absent progress keeps it.
-- Items apply in order, so a second ack of the same fence in one call misses.
-- Returns one string, a character per item: "1" landed, "0" the fence no longer held (nothing written).
--!include row.lua

local out = {}
local n = #ARGV / 6
for i = 1, n do
  local b = 6 * (i - 1)
  local id = ARGV[b + 1]
  local t = held(KEYS[1], id, ARGV[b + 2], ARGV[b + 3])
  if t then
    t[1] = "completed"
    t[5] = ""
    t[7] = ARGV[b + 4]
    redis.call("HSET", KEYS[1], id, join(t))
    redis.call("ZREM", KEYS[3], id)
    redis.call("HDEL", KEYS[2], ns_of(t))
    if ARGV[b + 5] ~= "" then
      redis.call("HSET", KEYS[4], id, ARGV[b + 5])
    else
      redis.call("HDEL", KEYS[4], id)
    end
    if ARGV[b + 6] ~= "" then
      redis.call("HSET", KEYS[5], id, ARGV[b + 6])
    end
    out[i] = "1"
  else
    out[i] = "0"
  end
end
return table.concat(out)

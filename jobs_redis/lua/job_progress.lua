-- job_progress — record each held job's progress (JSON text); fenced per item.
--
-- KEYS[1] job:state   KEYS[2] job:progress
-- ARGV[4(i-1) + 1 ..] per item i: id, claims, worker, progress_json
-- Returns one string, a character per item: "1" landed, "0" the fence no longer held.
--!include row.lua

local out = {}
local n = #ARGV / 4
for i = 1, n do
  local b = 4 * (i - 1)
  local id = ARGV[b + 1]
  if held(KEYS[1], id, ARGV[b + 2], ARGV[b + 3]) then
    redis.call("HSET", KEYS[2], id, ARGV[b + 4])
    out[i] = "1"
  else
    out[i] = "0"
  end
end
return table.concat(out)

-- job_progress — record each held job's progress (JSON text); fenced per item.
--
-- KEYS[1] job:state   KEYS[2] job:progress
-- ARGV[2i - 1] the id of item i, ARGV[2i] its meta: claims NUL worker NUL progress_json
-- Returns one string, a character per item: "1" landed, "0" the fence no longer held.
--!include row.lua

local out = {}
for i = 1, #ARGV / 2 do
  local id = ARGV[2 * i - 1]
  local t, rest = held_item(KEYS[1], id, ARGV[2 * i])
  if t then
    redis.call("HSET", KEYS[2], id, rest[1])
    out[i] = "1"
  else
    out[i] = "0"
  end
end
return table.concat(out)

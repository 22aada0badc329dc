-- step_put — record each step of the run a held job belongs to; each item fenced like job_ack.
--
-- KEYS[1] job:state   KEYS[2] job:data   KEYS[3] step:out   KEYS[4] step:index
--   (includes/durable.lua describes the step keys)
-- ARGV[2i - 1] the job id of item i, ARGV[2i] its meta: claims NUL worker NUL now_ms NUL
--   step name NUL output_json
-- Fenced: an item lands only while its row is `running` with those claims and that worker. A
-- landed item records (the row's run_id, name) -> now_ms, output_json unless that step is
-- recorded already: the first record stays, and the item still answers "1". A new step is one
-- HSETNX and one ZADD: O(log n) whatever the run has recorded before.
-- Returns one string, a character per item: "1" landed, "0" the fence no longer held.
--!include row.lua

local out = {}
for i = 1, #ARGV / 2 do
  local id = ARGV[2 * i - 1]
  local t, rest = held_item(KEYS[1], id, ARGV[2 * i])
  if t then
    local data = redis.call("HGET", KEYS[2], id)
    local run_id = string.sub(data, 1, string.find(data, Z, 1, true) - 1)
    local now, name, output = rest[1], rest[2], rest[3]
    local field = run_id .. Z .. name
    if redis.call("HSETNX", KEYS[3], field, now .. Z .. output) == 1 then
      redis.call("ZADD", KEYS[4], 0, field)
    end
    out[i] = "1"
  else
    out[i] = "0"
  end
end
return table.concat(out)

-- step_list — every recorded step of one run (read only).
--
-- KEYS[1] step:out   KEYS[2] step:index   (includes/durable.lua describes them)
-- ARGV[1] run_id
-- Returns flat, two per step in name (byte) order: the name, then recorded_at_ms NUL
-- output_json. One lex range of step:index finds the run's steps: O(log n + k).

local fields = redis.call("ZRANGEBYLEX", KEYS[2], "[" .. ARGV[1] .. "\0", "(" .. ARGV[1] .. "\1")
local skip = #ARGV[1] + 1
local out = {}
-- HMGET in slices: unpack's arguments live on Lua's C stack.
for s = 1, #fields, 500 do
  local got = redis.call("HMGET", KEYS[1], unpack(fields, s, math.min(s + 499, #fields)))
  for j = 1, #got do
    out[#out + 1] = string.sub(fields[s + j - 1], skip + 1)
    out[#out + 1] = got[j]
  end
end
return out

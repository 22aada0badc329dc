-- step_list — every recorded step of one run (read only).
--
-- KEYS[1] step:out   KEYS[2] step:names   (includes/durable.lua describes them)
-- ARGV[1] run_id
-- Returns flat, two per step in recording order: the name, then recorded_at_ms NUL output_json.

local names = redis.call("HGET", KEYS[2], ARGV[1])
if not names then
  return {}
end
local out, fields = {}, {}
local i = 1
while true do
  local j = string.find(names, "\0", i, true)
  out[#out + 1] = string.sub(names, i, (j or 0) - 1)
  out[#out + 1] = false
  fields[#fields + 1] = ARGV[1] .. "\0" .. out[#out - 1]
  if not j then
    break
  end
  i = j + 1
end
-- HMGET in slices: unpack's arguments live on Lua's C stack.
for s = 1, #fields, 500 do
  local got = redis.call("HMGET", KEYS[1], unpack(fields, s, math.min(s + 499, #fields)))
  for k = 1, #got do
    out[2 * (s + k - 1)] = got[k]
  end
end
return out

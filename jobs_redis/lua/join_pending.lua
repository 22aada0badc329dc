-- join_pending — per asked row parked on its current join, the dependencies that join still
-- counts (read only). Every PARK drops a row's old edges first and a finish removes the edge it
-- counts, so the `join:pending` members left for a parked row are exactly what it waits for.
--
-- KEYS[1] job:state   KEYS[2] join:pending (includes/flows.lua)
-- ARGV[1..n] ids
-- Returns one entry per id in order: the dependency ids NUL-joined in byte (code-point) order,
-- or "" for a row that is not parked, parked on nothing pending, or absent.
--!include row.lua

local out = {}
for i = 1, #ARGV do
  local id = ARGV[i]
  local raw = redis.call("HGET", KEYS[1], id)
  local deps = {}
  if raw and string.sub(raw, 1, string.find(raw, Z, 1, true) - 1) == "parked" then
    local lo, hi = "[" .. id .. Z, "(" .. id .. "\1"
    for _, m in ipairs(redis.call("ZRANGEBYLEX", KEYS[2], lo, hi)) do
      deps[#deps + 1] = string.sub(m, #id + 2)
    end
  end
  out[i] = table.concat(deps, Z)
end
return out

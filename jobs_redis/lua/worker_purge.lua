-- worker_purge — delete up to `limit` registry rows expired at now_ms, soonest expired first,
-- ties by worker id.
--
-- KEYS[1] worker (hash worker id -> last_beat_ms NUL expires_at_ms NUL info_json)
-- ARGV[1] now_ms (a row with expires_at_ms <= now_ms is expired)   ARGV[2] limit
-- No expiry index: the registry holds a row per worker not yet forgotten or purged (a fleet,
-- plus the dead since the last purge), which worker_list reads whole too, and an index would
-- cost every beat (the claim's included) a second write. So the hash is read whole, O(rows),
-- and `limit` rows at most are written. Atomic: several callers at once delete each row once.
-- Returns the number of rows deleted.
--!include id_order.lua
--!include row.lua

local now = tonumber(ARGV[1])
local expired = {}
local all = redis.call("HGETALL", KEYS[1])
for i = 1, #all, 2 do
  local row = all[i + 1]
  local a = string.find(row, Z, 1, true)
  local b = string.find(row, Z, a + 1, true)
  local ends = tonumber(string.sub(row, a + 1, b - 1))
  if ends <= now then
    expired[#expired + 1] = { ends = ends, id = all[i] }
  end
end
-- Ids compared byte by byte (`id_less`): Lua's own `<` follows the server's collation locale.
table.sort(expired, function(x, y)
  if x.ends ~= y.ends then
    return x.ends < y.ends
  end
  return id_less(x.id, y.id)
end)
local n = math.min(#expired, tonumber(ARGV[2]))
for i = 1, n, 500 do
  -- HDEL in slices: unpack's arguments live on Lua's C stack, which holds a few thousand.
  local ids = {}
  for j = i, math.min(i + 499, n) do
    ids[#ids + 1] = expired[j].id
  end
  redis.call("HDEL", KEYS[1], unpack(ids))
end
return n

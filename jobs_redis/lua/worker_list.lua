-- worker_list — registry rows not yet expired at now_ms (read only; expired rows stay until
-- forgotten, as in the reference).
--
-- KEYS[1] worker (hash worker id -> last_beat_ms NUL expires_at_ms NUL info_json)
-- ARGV[1] now_ms
-- Returns flat, per live worker: worker id, registry row (unordered; the caller sorts).
--!include row.lua

local now = tonumber(ARGV[1])
local out = {}
local all = redis.call("HGETALL", KEYS[1])
for i = 1, #all, 2 do
  local row = all[i + 1]
  local a = string.find(row, Z, 1, true)
  local b = string.find(row, Z, a + 1, true)
  if tonumber(string.sub(row, a + 1, b - 1)) > now then
    out[#out + 1] = all[i]
    out[#out + 1] = row
  end
end
return out

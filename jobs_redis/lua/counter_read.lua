-- counter_read — the counter buckets (both widths) starting in [since, until); reads only.
--
-- KEYS[1] counter (hash, includes/account.lua)   KEYS[2] counter:minute   KEYS[3] counter:hour
--   (zsets of bucket members `%013d bucket_ms` NUL name NUL queue, scored by bucket_ms)
-- ARGV[1] since_ms   ARGV[2] until_ms
-- ARGV[3] "1" to keep only the names in ARGV[4] (NUL-joined), "0" for every name
-- ARGV[5] "1" to keep only the queues in ARGV[6] (NUL-joined), "0" for every queue
-- O(log N + buckets in the window).
-- Returns flat, per bucket: width ("m" or "h"), member, then its 9 counts (COUNTED_OUTCOMES
-- order, "" for 0).
--!include row.lua

local function set_of(flag, joined)
  if flag ~= "1" then
    return nil
  end
  local s = {}
  for _, v in ipairs(split(joined)) do
    s[v] = true
  end
  return s
end
local names, queues = set_of(ARGV[3], ARGV[4]), set_of(ARGV[5], ARGV[6])

local out = {}
for w, key in pairs({ m = KEYS[2], h = KEYS[3] }) do
  for _, member in ipairs(redis.call("ZRANGEBYSCORE", key, ARGV[1], "(" .. ARGV[2])) do
    local f = split(member)
    if (names == nil or names[f[2]]) and (queues == nil or queues[f[3]]) then
      local fields = {}
      for k = 1, 9 do
        fields[k] = w .. member .. Z .. k
      end
      out[#out + 1] = w
      out[#out + 1] = member
      for _, v in ipairs(redis.call("HMGET", KEYS[1], unpack(fields))) do
        out[#out + 1] = v or ""
      end
    end
  end
end
return out

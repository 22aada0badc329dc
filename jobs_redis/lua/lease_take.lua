-- lease_take — grant each take while its lease key has room, in order (includes/lease.lua).
--
-- KEYS[2q - 1] hold:<key q>, KEYS[2q] holder:<key q>, for each distinct lease key q of the
--   items; KEYS[#KEYS - 2] hold-expiry; KEYS[#KEYS - 1] hold-clock; KEYS[#KEYS] hold-token
-- ARGV[1] now_ms
-- ARGV[2] the items, their fields joined by NUL (one argument, not five per item: encoding
--   arguments is most of a big call's cost): per item q, holder, limit, ttl_ms, stamp ("1" or
--   "0")
-- Each key is worked on at its time (lease_time: the later of now_ms and the key's clock, which
-- moves there), so a caller behind a fresher one is judged as at the fresher one's time.
-- Per item: the key's expired holdings go first (once per key and call); the holder's own live
-- holding, if any, is replaced by a new one (the count stays); else a new holding is stored
-- while fewer than `limit` are live; else nothing is written. A new holding ends at the key's
-- time + ttl_ms. Atomic, so two callers racing for a key's last room see each other: exactly
-- one is granted.
-- Returns two integers per item: the new holding's token and its expires_at_ms, or 0 and 0
-- where the key had no room.
--!include row.lua
--!include lease.lua

local now = ARGV[1]
local counter = KEYS[#KEYS]
clock_index = KEYS[#KEYS - 1]
expiry_index = KEYS[#KEYS - 2]
local pruned = {}
local out = {}
local f = split(ARGV[2])
for i = 1, #f / 5 do
  local b = 5 * i - 5
  local q, who, limit, ttl, stamp = f[b + 1], f[b + 2], f[b + 3], f[b + 4], f[b + 5]
  local hold, holder = hold_key(q), holder_key(q)
  local at = lease_time(q, now)
  if not pruned[q] then
    pruned[q] = true
    local gone = redis.call("ZRANGEBYSCORE", hold, "-inf", fmt(at))
    for _, token in ipairs(gone) do
      drop_holding(q, token)
    end
  end
  local own = redis.call("HGET", holder, Z .. who)
  if own or redis.call("ZCARD", hold) < tonumber(limit) then
    if own then
      drop_holding(q, own)
    end
    local token = redis.call("INCR", counter)
    local field = fmt(token)
    local ends = fmt(at + tonumber(ttl))
    redis.call("ZADD", hold, ends, field)
    redis.call("HSET", holder, field, who .. Z .. stamp, Z .. who, field)
    index_holding(q, field, ends)
    out[2 * i - 1] = token
    out[2 * i] = at + tonumber(ttl)
  else
    out[2 * i - 1] = 0
    out[2 * i] = 0
  end
end
return out

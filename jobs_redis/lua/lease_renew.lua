-- lease_renew — extend each live holding to its key's time + ttl_ms, in order
-- (includes/lease.lua).
--
-- KEYS[2q - 1] hold:<key q>, KEYS[2q] holder:<key q>, for each distinct lease key q of the items;
--   KEYS[#KEYS - 1] hold-expiry; KEYS[#KEYS] hold-clock
-- ARGV[1] now_ms
-- ARGV[2] the items, their fields joined by NUL: per item q, token, ttl_ms
-- Each key is worked on at its time (lease_time), whose clock moves there, forged tokens' keys
-- too: live means expires_at_ms > that time, and a renewal ends at that time + ttl_ms.
-- A holding that expired is never renewed, even when nobody took its room: whether it is still
-- stored depends on whether some take happened to drop it, and the answer must not. Writes only
-- to live holdings (an expired one is left for the next take, or lease_purge, to drop).
-- Returns one string, a character per item: "1" renewed, "0" not live (expired, replaced,
-- ended or never granted).
--!include row.lua
--!include lease.lua

local now = ARGV[1]
expiry_index = KEYS[#KEYS - 1]
clock_index = KEYS[#KEYS]
local out = {}
local f = split(ARGV[2])
for i = 1, #f / 3 do
  local b = 3 * i - 3
  local q, token, ttl = f[b + 1], f[b + 2], f[b + 3]
  local at = lease_time(q, now)
  local ends = fmt(at + tonumber(ttl))
  if holding_live(q, token, at) then
    redis.call("ZADD", hold_key(q), "XX", ends, token)
    -- Not XX: a holding stored before the index existed is indexed by its renewal.
    index_holding(q, token, ends)
    out[i] = "1"
  else
    out[i] = "0"
  end
end
return table.concat(out)

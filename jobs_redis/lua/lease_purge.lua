-- lease_purge — delete up to `limit` holdings expired at now_ms, soonest expired first, ties by
-- lease key then token (includes/lease.lua).
--
-- KEYS[1] hold-expiry (zset member <lease key> NUL <token, 19 digits>, scored by expires_at_ms)
-- ARGV[1] now_ms (a holding with expires_at_ms <= now_ms is expired)   ARGV[2] limit
-- The index's head is the purge order (equal scores order by member bytes: the lease key's
-- UTF-8, which is code-point order, then the zero-padded token). Each holding taken goes from
-- its lease key's hold and holder keys, named here from the hash tag and the lease key the
-- member carries: which keys a purge touches is known only once it has read the index (they
-- are in the prefix's one slot, as the waiters' queue keys a finish names). A lease key left
-- with no holding leaves no key behind (its zset and hash go with their last member). Atomic:
-- several callers at once delete each holding once. O(limit log n).
-- Returns the number of holdings deleted.
--!include row.lua
--!include lease.lua

local tag = string.match(KEYS[1], "^(%{[^{}]*%}):")
local gone = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", ARGV[1], "LIMIT", 0, tonumber(ARGV[2]))
for _, member in ipairs(gone) do
  -- The token is the member's last 19 bytes, after the NUL that ends the lease key.
  local key = string.sub(member, 1, #member - 20)
  local token = string.match(string.sub(member, -19), "^0*(%d+)$")
  drop_named(tag .. ":hold:" .. key, tag .. ":holder:" .. key, token)
end
-- What was read is the index's head: one rank range removes it (no unpack of 10,000 members).
if #gone > 0 then
  redis.call("ZREMRANGEBYRANK", KEYS[1], 0, #gone - 1)
end
return #gone

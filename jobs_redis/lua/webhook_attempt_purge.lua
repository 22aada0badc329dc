-- webhook_attempt_purge — delete up to `limit` attempts made before before_ms, oldest first.
--
-- KEYS[1] webhook:attempt   KEYS[2] webhook:attempts   KEYS[3] webhook:attempt-age
-- (includes/webhook.lua)
-- ARGV[1] before_ms (an attempt with at_ms < before_ms goes)   ARGV[2] limit
-- Equal scores order by member bytes (job id, then claims in 19 digits), so the age index's
-- head is the purge order and `LIMIT` reads no other entry. Each attempt leaves its hash field
-- and both indexes; no endpoint is read or written. Atomic: several callers at once delete each
-- attempt once. Returns the number of attempts deleted.
--!include row.lua
--!include webhook.lua

local gone = redis.call("ZRANGEBYSCORE", KEYS[3], "-inf", "(" .. ARGV[1], "LIMIT", 0,
  tonumber(ARGV[2]))
for _, key in ipairs(gone) do
  local a = split(redis.call("HGET", KEYS[1], key))
  redis.call("ZREM", KEYS[2], a[1] .. Z .. a[2] .. Z .. pad(a[9], 13) .. Z .. key)
  redis.call("HDEL", KEYS[1], key)
  redis.call("ZREM", KEYS[3], key)
end
return #gone

-- event_purge — delete up to `limit` expired events, least (expires_at_ms, id) first.
--
-- KEYS[1] event   KEYS[2] event:name   KEYS[3] event:expiry   (includes/durable.lua)
-- ARGV[1] now_ms (an event with expires_at_ms <= now_ms is expired)   ARGV[2] limit
-- Equal expiry scores order by id bytes, so the zset's head is the purge order. Atomic: several
-- callers at once delete each event once. A deleted id is free for a new event.
-- Returns the number of events deleted.
--!include row.lua
--!include match.lua
--!include durable.lua

local gone = redis.call("ZRANGEBYSCORE", KEYS[3], "-inf", ARGV[1], "LIMIT", 0, tonumber(ARGV[2]))
for _, id in ipairs(gone) do
  local e = split(redis.call("HGET", KEYS[1], id))
  redis.call("ZREM", KEYS[2], e[1] .. Z .. pad13(e[2]) .. Z .. id)
  redis.call("HDEL", KEYS[1], id)
  redis.call("ZREM", KEYS[3], id)
end
return #gone

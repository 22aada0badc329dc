-- consumer_cursor_get — the entry of one consumer for one tenant, or nil.
--
-- KEYS[1] consumer   (includes/consumer.lua)
-- ARGV[1] name NUL tenant ("" for a cross-tenant consumer)
-- Reads only. Returns the entry's text, or false.

return redis.call("HGET", KEYS[1], ARGV[1])

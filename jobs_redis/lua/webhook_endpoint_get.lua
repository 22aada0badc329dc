-- webhook_endpoint_get — one endpoint of one tenant.
--
-- KEYS[1] webhook:endpoint   (includes/webhook.lua)
-- ARGV[1] tenant ("" for None)   ARGV[2] endpoint
-- Returns the endpoint's row, or nil. Reads only.
--!include row.lua

return redis.call("HGET", KEYS[1], ARGV[1] .. Z .. ARGV[2])

-- webhook_endpoint_put — register an endpoint (enabled, no failures) or move a known one's URL.
--
-- KEYS[1] webhook:endpoint   KEYS[2] webhook:endpoints   (includes/webhook.lua)
-- ARGV[1] tenant ("" for None)   ARGV[2] endpoint   ARGV[3] url   ARGV[4] now_ms
-- A known endpoint keeps its state (enabled, failures, disabled_at, created_at).
-- Returns the endpoint as stored after.
--!include row.lua
--!include webhook.lua

local field = ARGV[1] .. Z .. ARGV[2]
local raw = redis.call("HGET", KEYS[1], field)
local e
if raw then
  e = split(raw)
  e[W_URL], e[W_UPDATED] = ARGV[3], ARGV[4]
else
  e = { ARGV[3], "1", "0", "", ARGV[4], ARGV[4] }
  redis.call("ZADD", KEYS[2], 0, field)
end
raw = join(e)
redis.call("HSET", KEYS[1], field, raw)
return raw

-- webhook_endpoint_enable — the operator's re-enable: enabled, the failure streak cleared.
--
-- KEYS[1] webhook:endpoint   (includes/webhook.lua)
-- ARGV[1] tenant ("" for None)   ARGV[2] endpoint   ARGV[3] now_ms
-- Returns the endpoint after, or nil when there is none (nothing written).
--!include row.lua
--!include webhook.lua

local field = ARGV[1] .. Z .. ARGV[2]
local raw = redis.call("HGET", KEYS[1], field)
if not raw then
  return nil
end
local e = split(raw)
e[W_ENABLED], e[W_FAILURES], e[W_DISABLED], e[W_UPDATED] = "1", "0", "", ARGV[3]
raw = join(e)
redis.call("HSET", KEYS[1], field, raw)
return raw

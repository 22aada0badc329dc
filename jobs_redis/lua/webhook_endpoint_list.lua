-- webhook_endpoint_list — the first endpoints by (tenant, endpoint), no tenant ("") first.
--
-- KEYS[1] webhook:endpoint   KEYS[2] webhook:endpoints   (includes/webhook.lua)
-- ARGV[1] limit
-- Reads `limit` members of the index and no others. Reads only.
-- Returns {field, row, field, row, ...} (field: tenant NUL endpoint).
--!include row.lua

local out = {}
for _, field in ipairs(redis.call("ZRANGEBYLEX", KEYS[2], "-", "+", "LIMIT", 0, ARGV[1])) do
  out[#out + 1] = field
  out[#out + 1] = redis.call("HGET", KEYS[1], field)
end
return out

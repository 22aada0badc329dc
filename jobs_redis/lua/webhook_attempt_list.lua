-- webhook_attempt_list — one endpoint's attempts, newest first.
--
-- KEYS[1] webhook:attempt   KEYS[2] webhook:attempts   (includes/webhook.lua)
-- ARGV[1] tenant ("" for None)   ARGV[2] endpoint   ARGV[3] limit
-- A reverse lex range of the endpoint's members: at_ms descending, ties by job id bytes then
-- claims descending, reading `limit` members and no others. Reads only.
-- Returns {job_id NUL claims, row, ...}.
--!include row.lua

local head = ARGV[1] .. Z .. ARGV[2] .. Z
local members = redis.call("ZREVRANGEBYLEX", KEYS[2], "(" .. head .. "\255", "[" .. head,
  "LIMIT", 0, ARGV[3])
local out = {}
for _, member in ipairs(members) do
  local key = string.sub(member, #head + 15)
  out[#out + 1] = key
  out[#out + 1] = redis.call("HGET", KEYS[1], key)
end
return out

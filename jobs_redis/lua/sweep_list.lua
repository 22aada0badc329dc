-- sweep_list — the ledger's entries (of one declaration name, or all), newest first.
--
-- KEYS[1] sweep   KEYS[2] sweep:started   KEYS[3] sweep:name   (includes/sweep.lua)
-- ARGV[1] "1" to list one name's entries, "0" for all   ARGV[2] that name   ARGV[3] limit
-- A reverse lex range of the index: started_at_ms descending, ties by run_id bytes descending
-- (code-point order for UTF-8), reading `limit` members and no others. Reads only.
-- Returns {run_id, entry, run_id, entry, ...}.
--!include row.lua
--!include decimal.lua
--!include sweep.lua

local members, skip
if ARGV[1] == "1" then
  local lo, hi = head_range(ARGV[2])
  members = redis.call("ZREVRANGEBYLEX", KEYS[3], hi, lo, "LIMIT", 0, ARGV[3])
  skip = #ARGV[2] + 15 -- name NUL 13 digits NUL
else
  members = redis.call("ZREVRANGEBYLEX", KEYS[2], "+", "-", "LIMIT", 0, ARGV[3])
  skip = 14 -- 13 digits NUL
end
local out = {}
for _, member in ipairs(members) do
  local run_id = string.sub(member, skip + 1)
  out[#out + 1] = run_id
  out[#out + 1] = redis.call("HGET", KEYS[1], run_id)
end
return out

-- consumer_list — the consumers' entries (of one name, or all) in (name, tenant) order.
--
-- KEYS[1] consumer   KEYS[2] consumer:names   (includes/consumer.lua)
-- ARGV[1] "1" to list one name's entries, "0" for all   ARGV[2] that name   ARGV[3] limit
-- A lex range of the index reading `limit` members and no others. Reads only.
-- Returns {member, entry, member, entry, ...} (member: name NUL tenant).

local lo, hi = "-", "+"
if ARGV[1] == "1" then
  lo, hi = "[" .. ARGV[2] .. "\0", "(" .. ARGV[2] .. "\1"
end
local out = {}
for _, member in ipairs(redis.call("ZRANGEBYLEX", KEYS[2], lo, hi, "LIMIT", 0, ARGV[3])) do
  out[#out + 1] = member
  out[#out + 1] = redis.call("HGET", KEYS[1], member)
end
return out

-- consumer_cursor_put — move a consumer's cursor from the one its turn read, fenced on the
-- turn's claim.
--
-- KEYS[1] job:state   KEYS[2] consumer   KEYS[3] consumer:names   (includes/consumer.lua)
-- ARGV[1] the fence's job id   ARGV[2] claims NUL worker NUL (the fence)   ARGV[3] name NUL
-- tenant   ARGV[4] "1" when an expected cursor is given, "0" for none stored   ARGV[5] the
-- expected cursor   ARGV[6] source   ARGV[7] the new cursor   ARGV[8] records (decimal text)
-- ARGV[9] lag ("" for None)   ARGV[10] worker id   ARGV[11] now_ms
-- Lands only while the fence holds (`held_item`) AND the stored cursor is ARGV[5] byte for byte
-- (with ARGV[4] "0": no entry is stored): a stale turn never moves a cursor back.
-- Returns 1 when it landed, else 0.
--!include row.lua
--!include decimal.lua
--!include consumer.lua

if not held_item(KEYS[1], ARGV[1], ARGV[2]) then
  return 0
end
local raw = redis.call("HGET", KEYS[2], ARGV[3])
local turns, records
if ARGV[4] == "0" then
  if raw then
    return 0
  end
  turns, records = "1", ARGV[8]
else
  if not raw then
    return 0
  end
  local e = split(raw)
  if e[C_CURSOR] ~= ARGV[5] then
    return 0
  end
  turns, records = dec_add(e[C_TURNS], "1"), dec_add(e[C_RECORDS], ARGV[8])
end
local entry = {}
entry[C_SOURCE], entry[C_CURSOR], entry[C_TURNS], entry[C_RECORDS] = ARGV[6], ARGV[7], turns, records
entry[C_LAG], entry[C_HOLDER], entry[C_JOB], entry[C_UPDATED] = ARGV[9], ARGV[10], ARGV[1], ARGV[11]
redis.call("HSET", KEYS[2], ARGV[3], join(entry))
redis.call("ZADD", KEYS[3], 0, ARGV[3])
return 1

-- job_heartbeat — extend each held lease to now_ms + lease_ms; fenced per item.
--
-- KEYS[1] job:state   KEYS[1 + q] lease:<queue q>, for each distinct queue q of the items
-- ARGV[2i - 1] the id of item i, ARGV[2i] its meta: claims NUL worker NUL the new lease end
--   (now_ms + lease_ms) NUL q ("0" for a row the caller could not find: no fence holds it)
-- A lapsed lease does not break the fence: only a new claim does.
-- Returns one string, a character per item: "1" landed, "0" the fence no longer held.
--!include row.lua

local out = {}
for i = 1, #ARGV / 2 do
  local id = ARGV[2 * i - 1]
  local t, rest = held_item(KEYS[1], id, ARGV[2 * i])
  if t then
    t[5] = rest[1]
    redis.call("HSET", KEYS[1], id, join(t))
    redis.call("ZADD", KEYS[1 + tonumber(rest[2])], rest[1], id)
    out[i] = "1"
  else
    out[i] = "0"
  end
end
return table.concat(out)

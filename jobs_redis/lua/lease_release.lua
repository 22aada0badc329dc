-- lease_release — end each holding now, in order (includes/lease.lua).
--
-- KEYS[2q - 1] hold:<key q>, KEYS[2q] holder:<key q>, for each distinct lease key q of the items;
--   KEYS[#KEYS - 1] hold-expiry; KEYS[#KEYS] hold-clock
-- ARGV[1] now_ms
-- ARGV[2] the items, their fields joined by NUL: per item q, token
-- Each key is worked on at its time (lease_time), whose clock moves there, forged tokens' keys
-- too: live means expires_at_ms > that time.
-- A live slot is deleted, so its room is free to the next take at once. A live stamp stays as
-- it is until it expires: it records a start that happened, and the rate counts starts. An
-- expired holding is deleted on the way (it counts for nothing).
-- Returns one string, a character per item: "1" the holding was live, else "0".
--!include row.lua
--!include lease.lua

local now = ARGV[1]
expiry_index = KEYS[#KEYS - 1]
clock_index = KEYS[#KEYS]
local out = {}
local f = split(ARGV[2])
for i = 1, #f / 2 do
  local q, token = f[2 * i - 1], f[2 * i]
  local live = holding_live(q, token, lease_time(q, now))
  if live == false or (live and not is_stamp(q, token)) then
    drop_holding(q, token)
  end
  out[i] = live and "1" or "0"
end
return table.concat(out)

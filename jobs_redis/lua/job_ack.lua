-- job_ack — complete each held job; each item is fenced by its own claims and worker.
--
-- KEYS[1] job:state   KEYS[2] job:live   KEYS[3] job:result   KEYS[4] job:progress
-- KEYS[4 + q] lease:<queue q>, for each distinct queue q of the items
-- KEYS[#KEYS - 6] finished:completed (zset id by finished_at_ms, read by job_purge)
-- KEYS[#KEYS - 5 .. #KEYS] the accounting keys (includes/account.lua): each landed ack moves
--   its `completed` counter and its queue's completed count
-- ARGV[2i - 1] the id of item i, ARGV[2i] its meta: claims NUL worker NUL now_ms NUL q NUL
--   result_json NUL progress_json ("" for an absent JSON value: JSON text is never empty;
--   q is "0" for a row the caller could not find, which no fence can hold).
--   An absent result clears the stored one; an absent progress keeps it.
--   (Two ARGV per item, not six: the client packs each argument, and that cost dominated.)
-- join:waiters, join:pending anywhere before the finished and accounting keys
--   (includes/flows.lua: the finish rule)
-- job:claimed, job:attempts anywhere before the finished and accounting keys
--   (includes/attempts.lua: each landed ack ends its claim as "completed")
-- Items apply in order, so a second ack of the same fence in one call misses.
-- Returns one string, a character per item: "1" landed, "0" the fence no longer held (nothing written).
--!include row.lua
--!include account.lua
--!include flows.lua
--!include attempts.lua

local FIN = acc_open(#KEYS - 5) - 1
local out = {}
for i = 1, #ARGV / 2 do
  local id = ARGV[2 * i - 1]
  local t, rest = held_item(KEYS[1], id, ARGV[2 * i])
  if t then
    attempt_end(id, t, rest[1], '"outcome":"completed"')
    local flags = flow_flags(t)
    t[1] = "completed"
    t[5] = ""
    t[7] = rest[1]
    redis.call("HSET", KEYS[1], id, join(t))
    redis.call("ZREM", KEYS[4 + tonumber(rest[2])], id)
    redis.call("ZADD", KEYS[FIN], rest[1], id)
    redis.call("HDEL", KEYS[2], ns_of(t))
    if rest[3] ~= "" then
      redis.call("HSET", KEYS[3], id, rest[3])
    else
      redis.call("HDEL", KEYS[3], id)
    end
    if rest[4] ~= "" then
      redis.call("HSET", KEYS[4], id, rest[4])
    end
    -- accounting
    count_settle(t, rest[1], "completed")
    count_rows(id, t[10], "completed", 1)
    flow_finished(id, flags, true, rest[1])
    out[i] = "1"
  else
    out[i] = "0"
  end
end
acc_close()
return table.concat(out)

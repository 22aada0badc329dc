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
--   (Two ARGV per item, not six: the client packs each argument, and that cost dominated. Not
--   one: the id read out of a joined item by `string.match` cost the script more than the
--   argument it saved, 2026-12-07.)
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

-- HELD: a `running` row's claims, worker, attempt, run_at, then its fields 8..13 with their
-- leading NUL (priority NUL max NUL queue NUL name NUL tenant NUL key), its queue, its
-- namespace (fields 11..13), its name, and what follows field 13 (the flow family's four
-- fields with their NULs, or ""). One match a row (row.lua: not `split`).
local HELD = "^running%z([^%z]*)%z([^%z]*)%z([^%z]*)%z[^%z]*%z([^%z]*)%z[^%z]*"
  .. "(%z[^%z]*%z[^%z]*%z([^%z]*)%z(([^%z]*)%z[^%z]*%z[^%z]*))(.*)$"
-- META: an item's meta (claims NUL worker NUL now NUL q NUL result NUL progress).
local META = "^([^%z]*)%z([^%z]*)%z([^%z]*)%z([^%z]*)%z([^%z]*)%z(.*)$"
local n = #ARGV / 2
-- The rows are read, and the landed ones written, a whole call's items per command (HMGET,
-- variadic HSET / ZREM / ZADD / HDEL), not one command per item and key: per-command overhead
-- inside a script was most of an ack's server CPU. Items still apply in order: an id seen
-- landing earlier in the call holds "completed" now, so its later items miss.
local ids = {}
for i = 1, n do
  ids[i] = ARGV[2 * i - 1]
end
local raws = {}
for i = 1, n, 1000 do
  local got = redis.call("HMGET", KEYS[1], unpack(ids, i, math.min(i + 999, n)))
  for j = 1, #got do
    raws[i + j - 1] = got[j]
  end
end
local out = {}
local landed = {}
local ends = {}
local states, finished, live, results, cleared, progress = {}, {}, {}, {}, {}, {}
local leases = {}
for i = 1, n do
  local id = ids[i]
  local mc, mw, now, q, result, prog = string.match(ARGV[2 * i], META)
  local c, w, a, run, tail, queue, ns, name, fl
  if raws[i] and not landed[id] then
    c, w, a, run, tail, queue, ns, name, fl = string.match(raws[i], HELD)
  end
  -- The fence: the row is running (the match), for exactly this claim and worker.
  if c and c == mc and w == mw then
    landed[id] = true
    local flags = nil
    if fl ~= "" then
      local t = split(raws[i]) -- a row of the flow family (flows.lua): its flags move
      flags = flow_flags(t)
      fl = Z .. table.concat(t, Z, 14)
    end
    ends[#ends + 1] = { id, { "running", c, w, a }, now, '"outcome":"completed"' }
    states[#states + 1] = id
    states[#states + 1] = "completed" .. Z .. c .. Z .. w .. Z .. a .. Z .. Z .. run .. Z .. now
      .. tail .. fl
    local l = child(leases, KEYS[4 + q])
    l[#l + 1] = id
    finished[#finished + 1] = now
    finished[#finished + 1] = id
    live[#live + 1] = ns
    if result ~= "" then
      results[#results + 1] = id
      results[#results + 1] = result
    else
      cleared[#cleared + 1] = id
    end
    if prog ~= "" then
      progress[#progress + 1] = id
      progress[#progress + 1] = prog
    end
    -- accounting
    count_settle_of(name, queue, now, "completed")
    count_rows(id, queue, "completed", 1)
    flow_finished(id, flags, true, now)
    out[i] = "1"
  else
    out[i] = "0"
  end
end
-- The history reads each row's claim before its row is written (attempts.lua's rule).
attempt_end_many(ends)
-- unpack's arguments live on Lua's C stack, which holds a few thousand: slices of 1,000.
local function each(cmd, key, args, step)
  for i = 1, #args, step do
    redis.call(cmd, key, unpack(args, i, math.min(i + step - 1, #args)))
  end
end
each("HSET", KEYS[1], states, 1000)
for lk, l in pairs(leases) do
  each("ZREM", lk, l, 1000)
end
each("ZADD", KEYS[FIN], finished, 1000)
each("HDEL", KEYS[2], live, 1000)
each("HSET", KEYS[3], results, 1000)
each("HDEL", KEYS[3], cleared, 1000)
each("HSET", KEYS[4], progress, 1000)
acc_close()
return table.concat(out)

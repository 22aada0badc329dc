-- job_purge — delete up to `limit` finished rows whose retention ran out, oldest finished first,
-- ties by id in byte (= code point) order; live rows are never in the indexes this reads.
--
-- KEYS[1] job:state   KEYS[2] job:data   KEYS[3] job:error   KEYS[4] job:progress
-- KEYS[5] job:result
-- KEYS[6..9] finished:cancelled, finished:completed, finished:dead, finished:failed
--   (zsets id by finished_at_ms, kept by every script that finishes or revives a row)
-- KEYS[10..13] wait, wait:index, step:out, step:index (includes/durable.lua: a purged row's wait
--   and its run's steps go with it); join:waiters, join:pending anywhere before the accounting
--   keys (includes/flows.lua: a purged waiter's join edges go); job:claimed, job:attempts
--   likewise (includes/attempts.lua: a purged row's history goes)
-- KEYS[#KEYS - 5 .. #KEYS] the accounting keys (includes/account.lua): a purged row leaves
--   job:created and its queue's counts
-- ARGV[1] limit
-- ARGV[2..5] per KEYS[6..9]: the latest finished_at_ms that is expired (now_ms - keep_ms), or
--   "" for a state kept forever
-- Every hash field of a purged id goes with it, so the id is free for a new row.
-- Returns the number of rows deleted.
--!include id_order.lua
--!include row.lua
--!include match.lua
--!include durable.lua
--!include account.lua
--!include flows.lua
--!include attempts.lua

acc_open(#KEYS - 5)

local limit = tonumber(ARGV[1])

-- Each state's expired rows, in (finished_at, id) order: a zset orders equal scores by member
-- bytes, so its head is already in purge order.
local lists = {}
for s = 1, 4 do
  local list = {}
  if ARGV[1 + s] ~= "" then
    local got = redis.call("ZRANGEBYSCORE", KEYS[5 + s], "-inf", ARGV[1 + s], "WITHSCORES", "LIMIT", 0, limit)
    for i = 1, #got, 2 do
      list[#list + 1] = { id = got[i], at = tonumber(got[i + 1]) }
    end
  end
  lists[s] = list
end

-- Merge the four heads; each state gives up a prefix of its zset.
local heads = { 1, 1, 1, 1 }
local doomed = {}
while #doomed < limit do
  local best, best_s = nil, nil
  for s = 1, 4 do
    local c = lists[s][heads[s]]
    if c and (best == nil or c.at < best.at or (c.at == best.at and id_less(c.id, best.id))) then
      best, best_s = c, s
    end
  end
  if best == nil then
    break
  end
  heads[best_s] = heads[best_s] + 1
  doomed[#doomed + 1] = best.id
end

for s = 1, 4 do
  local taken = heads[s] - 1
  if taken > 0 then
    redis.call("ZREMRANGEBYRANK", KEYS[5 + s], 0, taken - 1)
  end
end
-- accounting: read each row before it goes (its queue, state and creation time)
for i = 1, #doomed, 500 do
  local slice = { unpack(doomed, i, math.min(i + 499, #doomed)) }
  local rows = redis.call("HMGET", KEYS[1], unpack(slice))
  local datas = redis.call("HMGET", ACC.data, unpack(slice))
  for j = 1, #slice do
    local t = split(rows[j])
    count_gone(slice[j], t, datas[j])
    if (t[14] or "") ~= "" then
      flow_drop(slice[j]) -- a finished waiter's edges its dependencies never finished
    end
  end
end
acc_close()
for _, id in ipairs(doomed) do
  drop_row(KEYS[2], id)
end
-- HDEL in slices: unpack's arguments live on Lua's C stack, which holds a few thousand.
for i = 1, #doomed, 500 do
  local slice = { unpack(doomed, i, math.min(i + 499, #doomed)) }
  for k = 1, 5 do
    redis.call("HDEL", KEYS[k], unpack(slice))
  end
end
attempt_drop(doomed)
return #doomed

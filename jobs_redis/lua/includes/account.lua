-- includes/account.lua — what a script counts while it moves rows (inlined after row.lua, never
-- run alone): the settle counters of (name, queue, minute) and the per-queue row counts that
-- `queue_stats` reads. Both move INSIDE the script that moves the row, never in a second call.
--
-- A script takes the six accounting keys LAST in its KEYS (`Keys.account()`), in this order:
--   counter (hash)  counter:minute (zset)  queue:count (hash)  schema  job:created  job:data
-- and calls, in order: `acc_open(#KEYS - 5)` (answers that index), `count_settle` /
-- `count_rows` per row, then `acc_close()` before it returns. Increments are summed in Lua
-- tables and written once per distinct field, so a batch of a hundred acks of one name costs
-- one HINCRBY and one ZADD.
--
-- Counter fields: "m" .. bucket member .. NUL .. outcome number (1..9, `COUNTED_OUTCOMES`
-- order), where a bucket member is `%013d bucket_ms` NUL name NUL queue (the zsets' member: equal
-- scores order by it bytewise, which is (name, queue) in code-point order). Hour buckets use "h".
--
-- Row counts: `queue NUL total` and `queue NUL <final state>`. Ready, running and parked are
-- derived from the queue's own zsets (`queue_stats.lua`), so a claim moves no row count. A row
-- stored by a version before these counts is counted once `migrate` indexes it: until the
-- schema key says "2", `count_rows` moves a row's counts only when it is in job:created.

-- moves: now -> name -> queue -> outcome -> settles; rows: queue -> total|state -> delta.
local ACC = { moves = {}, rows = {}, gate = {}, new = {} }

local OUTCOME = {
  completed = 1, retried = 2, ["dead-lettered"] = 3, dropped = 4, refused = 5,
  interrupted = 6, shed = 7, suspended = 8, cancelled = 9,
}

local function acc_open(at)
  ACC.counters, ACC.minutes, ACC.qcount = KEYS[at], KEYS[at + 1], KEYS[at + 2]
  ACC.schema, ACC.created, ACC.data = KEYS[at + 3], KEYS[at + 4], KEYS[at + 5]
  ACC.all = redis.call("GET", ACC.schema) == "2"
  return at
end

-- The job:created member of a row: its creation time zero-padded to 13 digits (2^42 ms has 13),
-- then its id; `data` is its job:data row (run_id NUL created_at_ms NUL ...).
local function created_member(data, id)
  local a = string.find(data, Z, 1, true)
  local b = string.find(data, Z, a + 1, true)
  local c = string.sub(data, a + 1, b - 1)
  return string.rep("0", 13 - #c) .. c .. id
end

-- An empty store holds no row an older version wrote: mark it counted (enqueue scripts).
local function acc_fresh(state_key)
  if not ACC.all and redis.call("EXISTS", state_key) == 0 then
    redis.call("SET", ACC.schema, "2")
    ACC.all = true
  end
end

-- `jobs_core.semantics.nack_outcome`: the counter a landed nack of `kind` moves.
local function nack_outcome(kind, dead_letter)
  if kind == "retry" then
    return "retried"
  elseif kind == "fail" then
    return dead_letter == "1" and "dead-lettered" or "dropped"
  elseif kind == "park" then
    return "suspended"
  elseif kind == "shed" then
    return "shed"
  elseif kind == "interrupt" then
    return "interrupted"
  end
  return "refused"
end

-- Count one settle of row `t` (row.lua fields) at `now` under `outcome` (an OUTCOME name).
-- Per item only table lookups: a call's settles share a few (now, name, queue) buckets, whose
-- fields are built once, in acc_close (building strings per item cost more than the writes).
local function child(tbl, key)
  local c = tbl[key]
  if not c then
    c = {}
    tbl[key] = c
  end
  return c
end

local function count_settle_of(name, queue, now, outcome)
  local counts = child(child(child(ACC.moves, now), name), queue)
  counts[outcome] = (counts[outcome] or 0) + 1
end

local function count_settle(t, now, outcome)
  count_settle_of(t[11], t[10], now, outcome)
end

-- Whether row `id` is counted (always, once the schema says so). Asked before the row goes.
local function counted(id)
  if ACC.all then
    return true
  end
  local g = ACC.gate[id]
  if g == nil then
    local data = redis.call("HGET", ACC.data, id)
    g = data ~= false and redis.call("ZSCORE", ACC.created, created_member(data, id)) ~= false
    ACC.gate[id] = g
  end
  return g
end

-- Move the `what` ("total" or a final state) count of `queue` by `delta`, whatever the row.
local function row_delta(queue, what, delta)
  local by_what = child(ACC.rows, queue)
  by_what[what] = (by_what[what] or 0) + delta
end

-- The same, for a counted row only (`counted`).
local function count_rows(id, queue, what, delta)
  if counted(id) then
    row_delta(queue, what, delta)
  end
end

-- A row this script inserts: listed, and counted in its queue's total.
local function count_new(id, data, queue)
  local new = ACC.new
  new[#new + 1] = "0"
  new[#new + 1] = created_member(data, id)
  row_delta(queue, "total", 1)
end

-- A row leaves the store (purge, remove): its total, its final state's count, its index entry.
-- `data` is its job:data row, read before it is deleted.
local function count_gone(id, t, data)
  count_rows(id, t[10], "total", -1)
  if not is_live(t[1]) then
    count_rows(id, t[10], t[1], -1)
  end
  if data then
    redis.call("ZREM", ACC.created, created_member(data, id))
  end
end

local function acc_close()
  -- ZADD in slices: unpack's arguments live on Lua's C stack, which holds a few thousand.
  for i = 1, #ACC.new, 1000 do
    redis.call("ZADD", ACC.created, unpack(ACC.new, i, math.min(i + 999, #ACC.new)))
  end
  for now, by_name in pairs(ACC.moves) do
    local n = tonumber(now)
    local b = fmt(n - n % 60000)
    b = string.rep("0", 13 - #b) .. b
    for name, by_queue in pairs(by_name) do
      for queue, counts in pairs(by_queue) do
        local member = b .. Z .. name .. Z .. queue
        for outcome, k in pairs(counts) do
          redis.call("HINCRBY", ACC.counters, "m" .. member .. Z .. OUTCOME[outcome], k)
        end
        -- Several `now` of one minute name the same bucket: ZADD NX adds it once.
        redis.call("ZADD", ACC.minutes, "NX", b, member)
      end
    end
  end
  for queue, by_what in pairs(ACC.rows) do
    for what, n in pairs(by_what) do
      local f = queue .. Z .. what
      if n ~= 0 and redis.call("HINCRBY", ACC.qcount, f, n) == 0 then
        redis.call("HDEL", ACC.qcount, f)
      end
    end
  end
end

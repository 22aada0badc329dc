-- job_claim — bury lapsed final attempts, then claim up to `limit` due rows in
-- (priority, run_at, id) order across the asked queues, skipping paused queues and names; the
-- waiters the buries release are ready for the next claim, not this one.
--
-- KEYS[1] job:state   KEYS[2] job:data   KEYS[3] job:live   KEYS[4] job:error
-- KEYS[5] pause:queue (set)   KEYS[6] pause:name (set)   KEYS[7] worker (hash)
-- KEYS[5 + 3q] due:<queue q>, KEYS[6 + 3q] parked:<queue q>, KEYS[7 + 3q] lease:<queue q>
--   (zset id by lease end), for q = 1..m in ARGV order
-- wait, wait:index anywhere before the keys below (includes/durable.lua: a claimed parked
--   row's wait goes)
-- KEYS[#KEYS - 7] finished:dead, KEYS[#KEYS - 6] finished:failed (zsets id by finished_at_ms)
-- KEYS[#KEYS - 5 .. #KEYS] the accounting keys (includes/account.lua): each buried row moves its
--   `bury_outcome` counter and its queue's count of the final state (a claim moves no other)
-- ARGV[1] now_ms   ARGV[2] worker id   ARGV[3] limit   ARGV[4] lease end (now_ms + lease_ms)
-- ARGV[5] the last_error a buried row gets (jobs_core.semantics.LEASE_LAPSED_ERROR)
-- ARGV[6] m, then ARGV[7 .. 6+m] the queue names (distinct)
-- ARGV[7+m] d, then d job names whose exhausted rows are buried `failed` (else `dead`)
-- ARGV[8+m+d] the registry beat's worker id ("" for none), ARGV[9+m+d] its registry row
-- ARGV[10+m+d] lapsed by: a lease ending at or before it has lapsed (jobs_core.semantics.lapsed_by:
--   now_ms, or the earlier reclaim_until_ms of a worker back from an outage)
-- ARGV[11+m+d] the JSON members after settled_at of the entry a reclaimed or buried row's lapsed
--   claim ends with (jobs_core.attempts: outcome abandoned and its error)
-- job:claimed, job:attempts anywhere before the finished keys (includes/attempts.lua)
-- join:waiters, join:pending anywhere before the finished keys (includes/flows.lua: a bury
--   finishes its row)
-- Returns {claimed, buried}. claimed is one string: per job in claim order, id NUL state row (its
-- 13 fields) NUL join ("" for none; includes/flows.lua) NUL data row, the jobs joined by NUL (20
-- fields each: the rows have fixed field counts), "" for none. buried is flat, per row: id, name, queue, new state (unordered; the caller sorts by id).
--!include row.lua
--!include id_order.lua
--!include match.lua
--!include durable.lua
--!include account.lua
--!include flows.lua
--!include attempts.lua

local FIN = acc_open(#KEYS - 5) - 1

-- A claimable row's state, claims, worker, attempt, its fields 6..13 with their leading NUL,
-- and what follows field 13 (the flow family's fields, flows.lua; "" for a plain row).
local CLAIMABLE = "^([^%z]*)%z([^%z]*)%z([^%z]*)%z([^%z]*)%z[^%z]*"
  .. "(%z[^%z]*%z[^%z]*%z[^%z]*%z[^%z]*%z[^%z]*%z[^%z]*%z[^%z]*%z[^%z]*)(.*)$"
-- The next count of a claims or attempt field, for the small ones, without a C call (`fmt`).
local INC = {
  ["0"] = "1", ["1"] = "2", ["2"] = "3", ["3"] = "4", ["4"] = "5",
  ["5"] = "6", ["6"] = "7", ["7"] = "8", ["8"] = "9", ["9"] = "10",
}

local now = tonumber(ARGV[1])
local worker = ARGV[2]
local limit = tonumber(ARGV[3])
local lease_end = ARGV[4]
local m = tonumber(ARGV[6])
local d = tonumber(ARGV[7 + m])

if ARGV[8 + m + d] ~= "" then
  redis.call("HSET", KEYS[7], ARGV[8 + m + d], ARGV[9 + m + d])
end

local qpaused = {}
for q = 1, m do
  qpaused[q] = redis.call("SISMEMBER", KEYS[5], ARGV[6 + q]) == 1
end
local drop = {}
for i = 1, d do
  drop[ARGV[7 + m + i]] = true
end

local any_name_paused = redis.call("SCARD", KEYS[6]) > 0
local name_paused_cache = {}
local function name_paused(name)
  if not any_name_paused then
    return false
  end
  local p = name_paused_cache[name]
  if p == nil then
    p = redis.call("SISMEMBER", KEYS[6], name) == 1
    name_paused_cache[name] = p
  end
  return p
end

local function less(a, b)
  if a.score ~= b.score then
    return a.score < b.score
  end
  return id_less(a.id, b.id)
end

local buried = {}
-- The bury's finishes move their waiters after the claim chose its rows (the contract: a
-- waiter a claim's bury releases is claimable from the next claim on).
local finished = {}
local lapsed = {}
for q = 1, m do
  local lease_key = KEYS[7 + 3 * q]
  for _, id in ipairs(redis.call("ZRANGEBYSCORE", lease_key, "-inf", ARGV[10 + m + d])) do
    local t = split(redis.call("HGET", KEYS[1], id))
    if tonumber(t[4]) >= tonumber(t[9]) then
      local state = "dead"
      if drop[t[11]] then
        state = "failed"
      end
      local flags = flow_flags(t)
      attempt_end(id, t, ARGV[1], ARGV[11 + m + d])
      t[1] = state
      t[5] = ""
      t[7] = ARGV[1]
      redis.call("HSET", KEYS[1], id, join(t))
      redis.call("ZREM", lease_key, id)
      redis.call("HSET", KEYS[4], id, ARGV[5])
      redis.call("HDEL", KEYS[3], ns_of(t))
      if state == "dead" then
        redis.call("ZADD", KEYS[FIN - 1], ARGV[1], id)
      else
        redis.call("ZADD", KEYS[FIN], ARGV[1], id)
      end
      -- accounting
      count_settle(t, ARGV[1], state == "dead" and "dead-lettered" or "dropped")
      count_rows(id, t[10], state, 1)
      local b = #buried
      buried[b + 1] = id
      buried[b + 2] = t[11]
      buried[b + 3] = t[10]
      buried[b + 4] = state
      finished[#finished + 1] = { id = id, flags = flags }
    elseif not qpaused[q] and t[6] ~= "" and not name_paused(t[11]) then
      lapsed[#lapsed + 1] = { score = tonumber(t[8]) * B + tonumber(t[6]), id = id, row = t, lq = q }
    end
  end
end
table.sort(lapsed, less)

-- Scores only where lists are merged: this Redis prints each score it answers with `%.17g`
-- (about 3,600 instructions), and the script reads it back with a C call.
local unpaused = 0
for q = 1, m do
  if not qpaused[q] then
    unpaused = unpaused + 1
  end
end
local scored = #lapsed > 0 or unpaused > 1
local step = scored and 2 or 1

-- Up to `limit` due, unpaused rows of one queue in order. Within a priority run_at ascends, so
-- each priority is one score window [p*B, p*B + now]; past it the scan jumps to the next one.
local function due_in(q)
  local key = KEYS[5 + 3 * q]
  local out = {}
  local first = redis.call("ZRANGE", key, 0, 0, "WITHSCORES")
  if #first == 0 then
    return out
  end
  local p = math.floor(tonumber(first[2]) / B)
  while true do
    local lo = fmt(p * B)
    local hi = fmt(p * B + now)
    local offset = 0
    while true do
      local want = limit - #out
      if any_name_paused and want < 64 then
        want = 64
      end
      local batch
      if scored then
        batch = redis.call("ZRANGEBYSCORE", key, lo, hi, "WITHSCORES", "LIMIT", offset, want)
      else
        batch = redis.call("ZRANGEBYSCORE", key, lo, hi, "LIMIT", offset, want)
      end
      for i = 1, #batch, step do
        local id = batch[i]
        local c = { score = scored and tonumber(batch[i + 1]), id = id, q = q }
        local keep = true
        if any_name_paused then
          c.row = split(redis.call("HGET", KEYS[1], id))
          keep = not name_paused(c.row[11])
        end
        if keep then
          out[#out + 1] = c
          if #out >= limit then
            return out
          end
        end
      end
      if #batch < step * want then
        break
      end
      offset = offset + want
    end
    local nxt = redis.call("ZRANGEBYSCORE", key, fmt((p + 1) * B), "+inf", "WITHSCORES", "LIMIT", 0, 1)
    if #nxt == 0 then
      return out
    end
    p = math.floor(tonumber(nxt[2]) / B)
  end
end

local lists = { lapsed }
for q = 1, m do
  if not qpaused[q] then
    lists[#lists + 1] = due_in(q)
  end
end

-- Merge the sorted lists and take the first `limit`.
local heads = {}
for k = 1, #lists do
  heads[k] = 1
end
local chosen = {}
while #chosen < limit do
  local best, best_k = nil, nil
  for k = 1, #lists do
    local c = lists[k][heads[k]]
    if c and (best == nil or less(c, best)) then
      best, best_k = c, k
    end
  end
  if best == nil then
    break
  end
  heads[best_k] = heads[best_k] + 1
  chosen[#chosen + 1] = best
end

-- The chosen rows are read, and written, a whole claim per command (HMGET, variadic HSET / ZREM
-- / ZADD), not one command per row and key: per-command overhead inside a script was most of a
-- claim's server CPU. The chosen ids are distinct (a row is in one queue's due or lease zset).
-- unpack's arguments live on Lua's C stack, which holds a few thousand: slices of 1,000.
local function hmget(key, ids)
  local out = {}
  for i = 1, #ids, 1000 do
    local got = redis.call("HMGET", key, unpack(ids, i, math.min(i + 999, #ids)))
    for j = 1, #got do
      out[i + j - 1] = got[j]
    end
  end
  return out
end
local function each(cmd, key, args)
  for i = 1, #args, 1000 do
    redis.call(cmd, key, unpack(args, i, math.min(i + 999, #args)))
  end
end
local unread, chosen_ids = {}, {}
for i, c in ipairs(chosen) do
  chosen_ids[i] = c.id
  if not c.row then
    unread[#unread + 1] = c.id
  end
end
local read = hmget(KEYS[1], unread)
local datas = hmget(KEYS[2], chosen_ids)
local claimed = {}
local states, dues, leases = {}, {}, {}
local r = 0
for i, c in ipairs(chosen) do
  local raw
  if c.row then
    raw = join(c.row)
  else
    r = r + 1
    raw = read[r]
  end
  -- One match, not `split` (row.lua): state, claims, worker, attempt, then fields 6..13 with
  -- their leading NUL, then the flow family's fields with theirs ("" for a plain row).
  local was, claims, w, attempt, tail, fl = string.match(raw, CLAIMABLE)
  if was == "running" then
    -- reclaimed: its lapsed claim is over
    attempt_end(c.id, { was, claims, w, attempt }, ARGV[1], ARGV[11 + m + d])
  end
  local row13 = "running" .. Z .. (INC[claims] or fmt(claims + 1)) .. Z .. worker .. Z
    .. (INC[attempt] or fmt(attempt + 1)) .. Z .. lease_end .. tail
  states[#states + 1] = c.id
  states[#states + 1] = row13 .. fl
  local q = c.lq
  if c.q then
    q = c.q
    local z = dues[q]
    if not z then
      z = {}
      dues[q] = z
    end
    z[#z + 1] = c.id
    if was == "parked" then
      redis.call("ZREM", KEYS[6 + 3 * q], c.id)
      drop_wait(c.id)
    end
  end
  local l = child(leases, q)
  l[#l + 1] = lease_end
  l[#l + 1] = c.id
  local n = #claimed
  claimed[n + 1] = c.id
  claimed[n + 2] = row13
  claimed[n + 3] = fl ~= "" and string.match(fl, "^%z([^%z]*)") or ""
  claimed[n + 4] = data_row(datas[i])
end
attempt_claimed(chosen_ids, ARGV[1])
each("HSET", KEYS[1], states)
for q, z in pairs(dues) do
  each("ZREM", KEYS[5 + 3 * q], z)
end
for q, l in pairs(leases) do
  each("ZADD", KEYS[7 + 3 * q], l)
end
for _, f in ipairs(finished) do
  flow_finished(f.id, f.flags, false, ARGV[1])
end
acc_close()
return { table.concat(claimed, Z), buried }

-- includes/flows.lua — the flow family's rows, joins and the finish rule (inlined after row.lua,
-- never run alone). Every script that FINISHES a row (ack, nack fail/refuse, the claim's bury,
-- cancel, remove of a live row) calls `flow_flags(t)` before it writes the row and
-- `flow_finished(id, flags, completed, now)` after, so the rule lives here alone.
--
-- A row of the family carries four more state-row fields (row.lua's 13, then):
--   14 join   "total pending failed policy" (space-separated), "" for a row that never joined
--   15 flags  "w" watched (job_watch: its finish is PUBLISHed), "d" has waiters (edges below)
--   16 parent_id  17 batch_id ("" for none)
-- A row without any of them keeps its 13 fields, byte for byte: `flow_flags` of such a row is a
-- table lookup, so a finish of a row nobody waits for or watches makes no extra call.
--
-- Keys (hash tag `{p}` shared with every other key), found among KEYS by exact name as
-- includes/durable.lua finds its own:
--   {p}:join:waiters  zset, all scores 0, members dep NUL waiter: the rows parked on a join
--                     holding `dep` (a lex range per dependency; ids hold no NUL)
--   {p}:join:pending  zset, all scores 0, members waiter NUL dep: the dependencies of a
--                     waiter's CURRENT join not counted yet; removing a member is what counts
--                     it, so each (waiter, dependency) pair counts once
-- A waiter released at pending 0 becomes `ready` at the finish's now: its queue's due (and
-- parked) zsets are named from the shared hash tag and the row's queue, in the one slot every
-- key of the prefix lives in — the one place a script touches keys its caller did not declare,
-- since a finish cannot know its waiters' queues before it reads them.
-- Every PARK first drops the row's pending edges (`flow_drop`), so a row parked again (with or
-- without a join) is never moved by its old join; a waiter that left `parked` otherwise is
-- skipped at the finish (its edges go then, or at its next park, removal or purge).

local FK = nil

local function flow_keys()
  if FK then
    return FK
  end
  FK = {}
  for _, key in ipairs(KEYS) do
    local tag, suffix = string.match(key, "^(%{[^{}]*%}):(.*)$")
    if suffix == "join:waiters" then
      FK.waiters, FK.tag = key, tag
    elseif suffix == "join:pending" then
      FK.pending = key
    elseif suffix == "job:data" then
      FK.data = key
    end
  end
  return FK
end

-- Give row `t` the four flow fields (a 13-field row gets them empty).
local function flow_row(t)
  for i = 14, 17 do
    if t[i] == nil then
      t[i] = ""
    end
  end
end

local function join_parse(s)
  local total, pending, failed, policy = string.match(s, "^(%d+) (%d+) (%d+) (%a+)$")
  return tonumber(total), tonumber(pending), tonumber(failed), policy
end

local function join_format(total, pending, failed, policy)
  return fmt(total) .. " " .. fmt(pending) .. " " .. fmt(failed) .. " " .. policy
end

-- Before a finishing write of row `t`: its flags (nil when it has none), its "d" dropped (its
-- waiters are all seen by the finish).
local function flow_flags(t)
  local f = t[15]
  if f == nil or f == "" then
    return nil
  end
  if string.find(f, "d", 1, true) then
    t[15] = string.gsub(f, "d", "")
  end
  return f
end

local FLOW_TOLD = {}

-- A row of `queue` became due now: an idle worker of that queue claims it now (the poll stays
-- the guarantee). Once per queue per script.
local function flow_wake(queue)
  if not FLOW_TOLD[queue] then
    FLOW_TOLD[queue] = true
    redis.call("PUBLISH", flow_keys().tag .. ":wake:" .. queue, queue)
  end
end

-- Release waiter row `wt` (parked, its join's pending now 0): ready at `now`.
local function flow_release(w, wt, now)
  local k = flow_keys()
  local queue = wt[10]
  if wt[6] ~= "" then
    redis.call("ZREM", k.tag .. ":parked:" .. queue, w)
  end
  wt[1] = "ready"
  wt[6] = now
  redis.call("ZADD", k.tag .. ":due:" .. queue, score_of(wt[8], now), w)
  flow_wake(queue)
end

-- After row `id` finished (its new state already written, or the row deleted) with `flags`
-- from `flow_flags`: every parked waiter of it counts it (failed too unless `completed`), one
-- whose pending reaches 0 is released at `now` (nil for a removal, which takes no clock: then
-- at the waiter's own created_at_ms, as jobs_memory does); a watched row's id is PUBLISHed.
local function flow_finished(id, flags, completed, now)
  if flags == nil then
    return
  end
  local k = flow_keys()
  if string.find(flags, "d", 1, true) then
    local lo, hi = "[" .. id .. Z, "(" .. id .. "\1"
    local members = redis.call("ZRANGEBYLEX", k.waiters, lo, hi)
    if #members > 0 then
      redis.call("ZREMRANGEBYLEX", k.waiters, lo, hi)
    end
    for _, m in ipairs(members) do
      local w = string.sub(m, #id + 2)
      if redis.call("ZREM", k.pending, w .. Z .. id) == 1 then
        local raw = redis.call("HGET", KEYS[1], w)
        local wt = raw and split(raw)
        if wt and wt[1] == "parked" and (wt[14] or "") ~= "" then
          local total, pending, failed, policy = join_parse(wt[14])
          pending = pending - 1
          if not completed then
            failed = failed + 1
          end
          wt[14] = join_format(total, pending, failed, policy)
          if pending == 0 then
            local at = now
            if at == nil then
              local data = redis.call("HGET", k.data, w)
              local a = string.find(data, Z, 1, true)
              at = string.sub(data, a + 1, string.find(data, Z, a + 1, true) - 1)
            end
            flow_release(w, wt, at)
          end
          redis.call("HSET", KEYS[1], w, join(wt))
        end
      end
    end
  end
  if string.find(flags, "w", 1, true) then
    redis.call("PUBLISH", k.tag .. ":finish", id)
  end
end

-- Drop waiter `id`'s pending edges, both ways (a park, a removal or a purge of a row that ever
-- joined: `t[14]` set). O(log n + its pending dependencies).
local function flow_drop(id)
  local k = flow_keys()
  local lo, hi = "[" .. id .. Z, "(" .. id .. "\1"
  local members = redis.call("ZRANGEBYLEX", k.pending, lo, hi)
  if #members > 0 then
    for _, m in ipairs(members) do
      redis.call("ZREM", k.waiters, string.sub(m, #id + 2) .. Z .. id)
    end
    redis.call("ZREMRANGEBYLEX", k.pending, lo, hi)
  end
end

-- Count a join of waiter `w` (its row `wt`, held by the caller and written by it) on `deps`
-- as it stands now: pending (live rows), failed (finished other than completed, or absent),
-- and the absent ids in order. Writes nothing.
local function flow_count(w, wt, deps)
  local pending, failed, missing, live = 0, 0, {}, {}
  for _, d in ipairs(deps) do
    local state
    if d == w then
      state = wt[1]
    else
      local raw = redis.call("HGET", KEYS[1], d)
      state = raw and string.sub(raw, 1, string.find(raw, Z, 1, true) - 1)
    end
    if not state then
      failed = failed + 1
      missing[#missing + 1] = d
    elseif is_live(state) then
      pending = pending + 1
      live[#live + 1] = d
    elseif state ~= "completed" then
      failed = failed + 1
    end
  end
  return pending, failed, missing, live
end

-- Store the edges of waiter `w` (row `wt`, written by the caller) to its live dependencies
-- `live`, and mark each of them "d". O(log n) per dependency, whatever the others hold.
local function flow_edges(w, wt, live)
  local k = flow_keys()
  for _, d in ipairs(live) do
    redis.call("ZADD", k.waiters, 0, d .. Z .. w)
    redis.call("ZADD", k.pending, 0, w .. Z .. d)
    local dt = wt
    if d ~= w then
      dt = split(redis.call("HGET", KEYS[1], d))
    end
    flow_row(dt)
    if not string.find(dt[15], "d", 1, true) then
      dt[15] = dt[15] .. "d"
      if d ~= w then
        redis.call("HSET", KEYS[1], d, join(dt))
      end
    end
  end
end

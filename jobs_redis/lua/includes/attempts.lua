-- includes/attempts.lua — the attempt history (jobs_core.attempts; inlined by the loader after
-- row.lua, never run alone). Every write that ends a claim calls `attempt_end` (a batch:
-- `attempt_end_many`) once, before it changes the row's attempt, claims or worker fields, in the
-- same script (no round-trip).
--
-- Keys (hash tag `{p}` shared with every other key; jobs_redis.keys.Keys), declared in KEYS
-- anywhere and found by their exact names, as includes/durable.lua finds its own:
--   {p}:job:claimed   hash id -> the latest claim's time (ms)
--   {p}:job:attempts  hash id -> the last ATTEMPT_HISTORY entries, oldest first, each one
--                     compact JSON object, joined by "\n" (compact JSON never holds a raw
--                     newline), so an append and a trim are string operations, never a decode

-- jobs_core.attempts.ATTEMPT_HISTORY (tests/redis/test_attempts_redis.py holds them equal).
local ATTEMPT_HISTORY = 10

local AK = nil

local function attempt_keys()
  if AK then
    return AK
  end
  AK = {}
  for _, key in ipairs(KEYS) do
    local suffix = string.match(key, "^%{[^{}]*%}:(.*)$")
    if suffix == "job:claimed" then
      AK.claimed = key
    elseif suffix == "job:attempts" then
      AK.attempts = key
    end
  end
  return AK
end

-- The history of a row after its claim (fields `t`, as the ended claim held it; claimed at
-- `at`) ended at `now`: `old` (nil: none) with its oldest entry dropped at ATTEMPT_HISTORY, then
-- the new entry; `tail` is the entry's JSON members after settled_at (`"outcome":"…"` and the
-- error's, from Python).
-- A worker id's JSON, encoded once per script call: a batch's entries share one worker.
local WORKER_JSON = {}

local function attempt_history(t, at, now, tail, old)
  local wj = WORKER_JSON[t[3]]
  if not wj then
    wj = cjson.encode(t[3])
    WORKER_JSON[t[3]] = wj
  end
  local entry = '{"attempt":' .. t[4] .. ',"claims":' .. t[2] .. ',"worker":' .. wj
    .. ',"claimed_at":' .. at .. ',"settled_at":' .. now .. ',' .. tail .. '}'
  if old then
    local n, i = 1, 1
    while true do
      local j = string.find(old, "\n", i, true)
      if not j then
        break
      end
      n = n + 1
      i = j + 1
    end
    if n >= ATTEMPT_HISTORY then
      local j = string.find(old, "\n", 1, true)
      old = j and string.sub(old, j + 1) or nil
    end
    if old then
      entry = old .. "\n" .. entry
    end
  end
  return entry
end

-- Row `id` (its split fields `t`) ended its claim at `now` (see attempt_history).
local function attempt_end(id, t, now, tail)
  local k = attempt_keys()
  local at = redis.call("HGET", k.claimed, id) or now
  redis.call("HSET", k.attempts, id, attempt_history(t, at, now, tail, redis.call("HGET", k.attempts, id)))
end

-- `attempt_end` for many rows at once (a batch of acks): two HMGETs and one HSET a thousand
-- rows, not three commands a row. `ends` holds { id, t, now, tail } per row, ids distinct.
-- In slices: unpack's arguments live on Lua's C stack, which holds a few thousand (an ack of
-- 4,000 rows went past it).
local function attempt_end_many(ends)
  local k = attempt_keys()
  for s = 1, #ends, 1000 do
    local last = math.min(s + 999, #ends)
    local ids = {}
    for i = s, last do
      ids[#ids + 1] = ends[i][1]
    end
    local ats = redis.call("HMGET", k.claimed, unpack(ids))
    local olds = redis.call("HMGET", k.attempts, unpack(ids))
    local args = {}
    for i = s, last do
      local e, j = ends[i], i - s + 1
      args[2 * j - 1] = e[1]
      args[2 * j] = attempt_history(e[2], ats[j] or e[3], e[3], e[4], olds[j] or nil)
    end
    redis.call("HSET", k.attempts, unpack(args))
  end
end

-- A claim of rows `ids` at `now`: their claim time (one HSET a thousand rows).
local function attempt_claimed(ids, now)
  local key = attempt_keys().claimed
  for i = 1, #ids, 1000 do
    local args = {}
    for j = i, math.min(i + 999, #ids) do
      args[#args + 1] = ids[j]
      args[#args + 1] = now
    end
    redis.call("HSET", key, unpack(args))
  end
end

-- Rows deleted (purged, removed): their history goes with them.
local function attempt_drop(ids)
  local k = attempt_keys()
  for i = 1, #ids, 500 do
    local slice = { unpack(ids, i, math.min(i + 499, #ids)) }
    redis.call("HDEL", k.claimed, unpack(slice))
    redis.call("HDEL", k.attempts, unpack(slice))
  end
end

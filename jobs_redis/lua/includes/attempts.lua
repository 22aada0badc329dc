-- includes/attempts.lua — the attempt history (jobs_core.attempts; inlined by the loader after
-- row.lua, never run alone). Every write that ends a claim calls `attempt_end` once, before it
-- changes the row's attempt, claims or worker fields, in the same script (no round-trip).
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

-- Row `id` (its split fields `t`, as the ended claim held it) ended its claim at `now`; `tail`
-- is the entry's JSON members after settled_at (`"outcome":"…"` and the error's, from Python).
local function attempt_end(id, t, now, tail)
  local k = attempt_keys()
  local at = redis.call("HGET", k.claimed, id) or now
  local entry = '{"attempt":' .. t[4] .. ',"claims":' .. t[2] .. ',"worker":' .. cjson.encode(t[3])
    .. ',"claimed_at":' .. at .. ',"settled_at":' .. now .. ',' .. tail .. '}'
  local old = redis.call("HGET", k.attempts, id)
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
  redis.call("HSET", k.attempts, id, entry)
end

-- A claim of row `id` at `now`: its claim time.
local function attempt_claimed(id, now)
  redis.call("HSET", attempt_keys().claimed, id, now)
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

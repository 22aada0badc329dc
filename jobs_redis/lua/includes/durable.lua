-- includes/durable.lua — steps, waits and events kept beside their rows (inlined by the loader
-- after row.lua and match.lua, never run alone). Every script that moves a row out of `parked`
-- or deletes it calls one function here, so the rules live in one place:
--   drop_wait(id)          the row left `parked` (claimed, woken, cancelled, removed, purged)
--   drop_row(data_key, id) the row is deleted (purged, removed): its wait and its run's steps
--
-- Keys (hash tag `{p}` shared with every other key; jobs_redis.keys.Keys):
--   {p}:wait         hash id -> event NUL since_ms NUL match lines NUL match_json: the wait of a
--                    parked row (the match's lines decide a publish; its JSON text, as the nack
--                    gave it, is what job_get_many reports. A wait stored before the text was
--                    kept has the first three fields: the driver then rebuilds it from the lines)
--   {p}:wait:index   zset, all scores 0, members event NUL id: the waits by event name, so a
--                    publish reads the rows waiting for its name and no others (a lex range)
--   {p}:step:out     hash run_id NUL step name -> recorded_at_ms NUL output_json
--   {p}:step:index   zset, all scores 0, members run_id NUL step name (the fields of step:out):
--                    a run's steps are one lex range, so a put is one ZADD (O(log n)) and a
--                    list or a drop is O(log n + the run's steps)
--   {p}:event        hash id -> name NUL published_at_ms NUL expires_at_ms NUL data match lines
--                    NUL data_json
--   {p}:event:name   zset, all scores 0, members name NUL published_at_ms (13 digits) NUL id:
--                    a lex range from (name, since) walks one name's events by (published, id)
--   {p}:event:expiry zset id by expires_at_ms (equal scores by id bytes: the purge order)
-- A script declares the ones it touches in KEYS, anywhere in the list: they are found by their
-- exact names (the prefix holds no brace, so no queue key can end the same way), and so the
-- scripts that existed before this family kept their KEYS arithmetic unchanged.

local DK = nil
local DK_NAMES = {
  wait = "wait",
  wait_index = "wait:index",
  step_out = "step:out",
  step_index = "step:index",
  event = "event",
  event_name = "event:name",
  event_expiry = "event:expiry",
}

-- The durable keys among KEYS, by role; a role the script did not declare is nil.
local function durable_keys()
  if DK then
    return DK
  end
  local by_suffix = {}
  for role, suffix in pairs(DK_NAMES) do
    by_suffix[suffix] = role
  end
  DK = {}
  for _, key in ipairs(KEYS) do
    local suffix = string.match(key, "^%{[^{}]*%}:(.*)$")
    local role = suffix and by_suffix[suffix]
    if role then
      DK[role] = key
    end
  end
  return DK
end

-- Drop the wait of row `id`, if it has one.
local function drop_wait(id)
  local k = durable_keys()
  local w = redis.call("HGET", k.wait, id)
  if w then
    local event = string.sub(w, 1, string.find(w, Z, 1, true) - 1)
    redis.call("ZREM", k.wait_index, event .. Z .. id)
    redis.call("HDEL", k.wait, id)
  end
end

-- The lex range of `run_id`'s members in step:index (a run_id holds no NUL).
local function step_range(run_id)
  return "[" .. run_id .. Z, "(" .. run_id .. "\1"
end

-- Drop every recorded step of `run_id`: O(log n + k) for its k steps, whatever else is stored.
local function drop_steps(run_id)
  local k = durable_keys()
  local lo, hi = step_range(run_id)
  local fields = redis.call("ZRANGEBYLEX", k.step_index, lo, hi)
  if #fields > 0 then
    -- HDEL in slices: unpack's arguments live on Lua's C stack.
    for s = 1, #fields, 500 do
      redis.call("HDEL", k.step_out, unpack(fields, s, math.min(s + 499, #fields)))
    end
    redis.call("ZREMRANGEBYLEX", k.step_index, lo, hi)
  end
end

-- A row is being deleted (call before its data row goes): its wait and its run's steps go too.
local function drop_row(data_key, id)
  drop_wait(id)
  local data = redis.call("HGET", data_key, id)
  if data then
    drop_steps(string.sub(data, 1, string.find(data, Z, 1, true) - 1))
  end
end

local function pad13(ms)
  return string.format("%013d", tonumber(ms))
end

-- The event with the least (published_at, id) named `name`, published at or after `since`,
-- unexpired at `now`, whose data the match lines take: {id, fields of its {p}:event row}, or nil.
local function event_first(name, since, now, lines)
  local k = durable_keys()
  local lo = "[" .. name .. Z .. pad13(since)
  local hi = "(" .. name .. "\1"
  local skip = #name + 15 -- name NUL 13 digits NUL
  local now_n = tonumber(now)
  local offset = 0
  while true do
    local batch = redis.call("ZRANGEBYLEX", k.event_name, lo, hi, "LIMIT", offset, 100)
    for _, member in ipairs(batch) do
      local id = string.sub(member, skip + 1)
      local e = split(redis.call("HGET", k.event, id))
      if tonumber(e[3]) > now_n and event_matches(lines, e[4]) then
        return id, e
      end
    end
    if #batch < 100 then
      return nil
    end
    offset = offset + 100
  end
end

-- Park row `id` waiting for an event: true (and nothing stored) when a stored, unexpired event
-- already meets the wait — the caller then makes the row ready at `now` — else the wait is
-- stored with the row (with its match's JSON text, for job_get_many) and indexed under its
-- event name.
local function park_wait(id, event, since, lines, match_json, now)
  if event_first(event, since, now, lines) then
    return true
  end
  local k = durable_keys()
  redis.call("HSET", k.wait, id, event .. Z .. since .. Z .. lines .. Z .. match_json)
  redis.call("ZADD", k.wait_index, 0, event .. Z .. id)
  return false
end

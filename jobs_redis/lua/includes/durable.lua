-- includes/durable.lua — steps, waits and events kept beside their rows (inlined by the loader
-- after row.lua and match.lua, never run alone). Every script that moves a row out of `parked`
-- or deletes it calls one function here, so the rules live in one place:
--   drop_wait(id)          the row left `parked` (claimed, woken, cancelled, removed, purged)
--   drop_row(data_key, id) the row is deleted (purged, removed): its wait and its run's steps
--
-- Keys (hash tag `{p}` shared with every other key; jobs_redis.keys.Keys):
--   {p}:wait         hash id -> event NUL since_ms NUL match lines NUL match_json NUL tenant NUL
--                    until_ms: the wait of a parked row (the match's lines decide a publish;
--                    its JSON text, as the nack gave it, is what job_get_many reports; tenant ""
--                    for none, until_ms "" for no end. A wait stored before the text was kept
--                    has the first three fields, one stored before its tenant the first four:
--                    no tenant, no end)
--   {p}:wait:index   zset, all scores 0, members event NUL tenant NUL id (tenant "" for none;
--                    a wait stored before its tenant: event NUL id): the waits by event name
--                    and tenant, so a publish reads the rows waiting for its name of its
--                    tenant and no others (a lex range; the name's range for every tenant)
--   {p}:step:out     hash run_id NUL step name -> recorded_at_ms NUL output_json
--   {p}:step:index   zset, all scores 0, members run_id NUL step name (the fields of step:out):
--                    a run's steps are one lex range, so a put is one ZADD (O(log n)) and a
--                    list or a drop is O(log n + the run's steps)
--   {p}:event        hash id -> name NUL published_at_ms NUL expires_at_ms NUL data match lines
--                    NUL data_json NUL tenant ("" for none) NUL "1" for every tenant, else "0"
--                    (an event stored before its tenant has the first five: for no tenant)
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

-- The wait:index member of row `id`'s wait `w` (its split {p}:wait fields).
local function wait_member(id, w)
  if w[5] == nil then
    return w[1] .. Z .. id -- stored before waits kept their tenant
  end
  return w[1] .. Z .. w[5] .. Z .. id
end

-- The job id of a wait:index member of event `name` (either form).
local function waiting_id(member, name)
  local rest = string.sub(member, #name + 2)
  local j = string.find(rest, Z, 1, true)
  return j and string.sub(rest, j + 1) or rest
end

-- Drop the wait of row `id`, if it has one.
local function drop_wait(id)
  local k = durable_keys()
  local w = redis.call("HGET", k.wait, id)
  if w then
    redis.call("ZREM", k.wait_index, wait_member(id, split(w)))
    redis.call("HDEL", k.wait, id)
  end
end

-- Whether event fields `e` (split {p}:event row) are for `tenant` ("" for none) or every one.
local function event_for(e, tenant)
  return e[7] == "1" or (e[6] or "") == tenant
end

-- Whether a wait's window ends after `published` (`ends` "" or nil: it never ends).
local function before_end(published, ends)
  return ends == nil or ends == "" or tonumber(published) < tonumber(ends)
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
  redis.call("HDEL", data_key, id .. ACTS) -- acts-for
  local data = redis.call("HGET", data_key, id)
  if data then
    drop_steps(string.sub(data, 1, string.find(data, Z, 1, true) - 1))
  end
end

local function pad13(ms)
  return string.format("%013d", tonumber(ms))
end

-- The event with the least (published_at, id) named `name`, published in [since, ends) (`ends`
-- "": no end; a wait's until_ms), for `tenant` ("" for none) or every tenant, unexpired at
-- `now`, whose data the match lines take: {id, fields of its {p}:event row}, or nil. The lex
-- range is bounded at both ends: an event at or after `ends` is never read.
local function event_first(name, since, ends, tenant, now, lines)
  local k = durable_keys()
  local lo = "[" .. name .. Z .. pad13(since)
  -- B is 2^42, one past every time (row.lua).
  local hi = "(" .. name .. Z .. pad13(ends ~= "" and ends or B)
  local skip = #name + 15 -- name NUL 13 digits NUL
  local now_n = tonumber(now)
  local offset = 0
  while true do
    local batch = redis.call("ZRANGEBYLEX", k.event_name, lo, hi, "LIMIT", offset, 100)
    for _, member in ipairs(batch) do
      local id = string.sub(member, skip + 1)
      local e = split(redis.call("HGET", k.event, id))
      if tonumber(e[3]) > now_n and event_for(e, tenant) and event_matches(lines, e[4]) then
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
-- event name and tenant.
local function park_wait(id, event, since, lines, match_json, tenant, ends, now)
  if event_first(event, since, ends, tenant, now, lines) then
    return true
  end
  local k = durable_keys()
  local w = { event, since, lines, match_json, tenant, ends }
  redis.call("HSET", k.wait, id, table.concat(w, Z))
  redis.call("ZADD", k.wait_index, 0, wait_member(id, w))
  return false
end

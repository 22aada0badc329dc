-- event_publish — store an event unless its id is stored, then wake every parked row whose wait
-- it meets (jobs_memory's _event_publish), atomically; then tell idle workers of those queues.
--
-- KEYS[1] job:state   KEYS[2] event   KEYS[3] event:name   KEYS[4] event:expiry
-- KEYS[5] wait   KEYS[6] wait:index   (includes/durable.lua describes them)
-- KEYS[5 + 2q] due:<queue q>, KEYS[6 + 2q] parked:<queue q>, for q = 1..m: the queues the
--   caller expects woken rows in (it cannot know them before the script reads the waits)
-- ARGV[1] id   ARGV[2] name   ARGV[3] published_at_ms   ARGV[4] expires_at_ms
-- ARGV[5] the data's match lines (jobs_redis.match)   ARGV[6] data_json
-- ARGV[7] its tenant ("" for none)   ARGV[8] "1" when it is for every tenant, else "0"
-- ARGV[9] m, then per queue q: ARGV[8 + 2q] its name, ARGV[9 + 2q] its wake channel
-- A wait is met when its event is the name, it is of the event's tenant (any tenant's, for an
-- event for every tenant: the wait index is read by (name, tenant), or by name), since_ms <=
-- published_at_ms < until_ms (when it has one) and its match lines are all lines of the data.
-- A met row becomes `ready` with run_at_ms = published_at_ms (its attempt was given back at the
-- park), and its wait goes. Each queue that got a row gets one PUBLISH of its name on its wake
-- channel, as an enqueue does, so an idle worker claims it now.
-- Returns the number of rows woken (0 and nothing written for a known id); or, when a met row
-- lives in a queue the caller did not name, {"queues", queue...} and nothing written: the
-- caller runs the script again naming those queues too.
--!include row.lua
--!include match.lua
--!include durable.lua

local id, name, published, lines = ARGV[1], ARGV[2], ARGV[3], ARGV[5]
local tenant, everyone = ARGV[7], ARGV[8] == "1"
if redis.call("HEXISTS", KEYS[2], id) == 1 then
  return 0
end

local m = tonumber(ARGV[9])
local queue_at = {}
for q = 1, m do
  queue_at[ARGV[8 + 2 * q]] = q
end

-- The rows this event wakes, before any write: a missing queue must leave nothing written.
local lo, hi = "[" .. name .. Z .. tenant .. Z, "(" .. name .. Z .. tenant .. "\1"
if everyone then
  lo, hi = "[" .. name .. Z, "(" .. name .. "\1"
end
local woken, missing, missing_seen = {}, {}, {}
for _, member in ipairs(redis.call("ZRANGEBYLEX", KEYS[6], lo, hi)) do
  local job_id = waiting_id(member, name)
  local w = split(redis.call("HGET", KEYS[5], job_id))
  if tonumber(w[2]) <= tonumber(published) and before_end(published, w[6])
    and event_matches(w[3], lines) then
    local t = split(redis.call("HGET", KEYS[1], job_id))
    local q = queue_at[t[10]]
    if t[1] ~= "parked" then
      -- Unreachable while every script that moves a row out of `parked` drops its wait; a
      -- stale wait must still never wake a row that is not waiting.
      q = nil
    elseif not q then
      if not missing_seen[t[10]] then
        missing_seen[t[10]] = true
        missing[#missing + 1] = t[10]
      end
    else
      woken[#woken + 1] = { id = job_id, row = t, q = q }
    end
  end
end
if #missing > 0 then
  table.insert(missing, 1, "queues")
  return missing
end

local fields = { name, published, ARGV[4], lines, ARGV[6], tenant, everyone and "1" or "0" }
redis.call("HSET", KEYS[2], id, table.concat(fields, Z))
redis.call("ZADD", KEYS[3], 0, name .. Z .. pad13(published) .. Z .. id)
redis.call("ZADD", KEYS[4], ARGV[4], id)

local told = {}
for _, r in ipairs(woken) do
  local t = r.row
  t[1] = "ready"
  t[6] = published
  redis.call("HSET", KEYS[1], r.id, join(t))
  redis.call("ZREM", KEYS[6 + 2 * r.q], r.id)
  redis.call("ZADD", KEYS[5 + 2 * r.q], score_of(t[8], published), r.id)
  drop_wait(r.id)
  told[r.q] = true
end
for q = 1, m do
  if told[q] then
    redis.call("PUBLISH", ARGV[9 + 2 * q], ARGV[8 + 2 * q])
  end
end
return #woken

-- webhook_attempt_put — record one attempt under the claim that made it, and move its
-- endpoint's failure streak, in one step.
--
-- KEYS[1] job:state   KEYS[2] webhook:endpoint   KEYS[3] webhook:attempt
-- KEYS[4] webhook:attempts   KEYS[5] webhook:attempt-age   (includes/webhook.lua)
-- ARGV[1] the fence's job id   ARGV[2] claims NUL worker NUL (the fence)   ARGV[3] claims as 19
-- digits   ARGV[4] tenant ("" for None)   ARGV[5] endpoint   ARGV[6] event_id   ARGV[7] outcome
-- ARGV[8] status_code ("" for None)   ARGV[9] latency_ms   ARGV[10] excerpt   ARGV[11] error
-- ("" for None)   ARGV[12] disable_after   ARGV[13] now_ms
-- Off the fence (`held_item`, row.lua) or without the endpoint: nothing, returns {0}. An attempt
-- of this claim recorded before (a retried call): nothing, returns {1, endpoint}. Else the
-- attempt is stored and indexed, the streak reset (delivered) or grown (failed: an enabled
-- endpoint reaching ARGV[12] is disabled at now), returns {1, endpoint after}.
--!include row.lua
--!include webhook.lua

if not held_item(KEYS[1], ARGV[1], ARGV[2]) then
  return { 0 }
end
local field = ARGV[4] .. Z .. ARGV[5]
local raw = redis.call("HGET", KEYS[2], field)
if not raw then
  return { 0 }
end
local key = ARGV[1] .. Z .. ARGV[3]
if redis.call("HEXISTS", KEYS[3], key) == 1 then
  return { 1, raw }
end
redis.call(
  "HSET",
  KEYS[3],
  key,
  join({ ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11], ARGV[13] })
)
redis.call("ZADD", KEYS[4], 0, field .. Z .. pad(ARGV[13], 13) .. Z .. key)
redis.call("ZADD", KEYS[5], ARGV[13], key)
local e = split(raw)
if ARGV[7] == "delivered" then
  e[W_FAILURES] = "0"
else
  local failures = tonumber(e[W_FAILURES]) + 1
  e[W_FAILURES] = fmt(failures)
  if e[W_ENABLED] == "1" and failures >= tonumber(ARGV[12]) then
    e[W_ENABLED], e[W_DISABLED] = "0", ARGV[13]
  end
end
e[W_UPDATED] = ARGV[13]
raw = join(e)
redis.call("HSET", KEYS[2], field, raw)
return { 1, raw }

-- sweep_finish — end run ARGV[3]'s running entry, `completed` or `failed`, fenced on the run's
-- claim.
--
-- KEYS[1] job:state   KEYS[2] job:data   KEYS[3] sweep   KEYS[4] sweep:done
--   (includes/sweep.lua)
-- ARGV[1] the fence's job id   ARGV[2] claims NUL worker NUL (the fence)   ARGV[3] run_id
-- ARGV[4] status   ARGV[5] error ("" for None)   ARGV[6] now_ms
-- Applies only while the fence holds for run ARGV[3] (`held_for_run`) and the entry is
-- `running`: status, error, finished_at and updated_at = now; a completed entry joins its
-- sweep's sweep:done range (what blocks a re-run).
-- Returns 1 when it applied, else 0.
--!include row.lua
--!include decimal.lua
--!include sweep.lua

if not held_for_run(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3]) then
  return 0
end
local run_id, now = ARGV[3], ARGV[6]
local raw = redis.call("HGET", KEYS[3], run_id)
if not raw then
  return 0
end
local e = split(raw)
if e[S_STATUS] ~= "running" then
  return 0
end
e[S_STATUS], e[S_ERROR], e[S_FINISHED], e[S_UPDATED] = ARGV[4], ARGV[5], now, now
redis.call("HSET", KEYS[3], run_id, join(e))
if ARGV[4] == "completed" then
  local head = sweep_head(e[S_NAME], e[S_SCOPE], e[S_ENV], e[S_CHECKSUM])
  redis.call("ZADD", KEYS[4], 0, head .. Z .. ms13(now) .. Z .. run_id)
end
return 1

-- sweep_start — open or resume run ARGV[3]'s ledger entry, fenced on the run's claim, unless a
-- completed run of the same sweep blocks it.
--
-- KEYS[1] job:state   KEYS[2] job:data   KEYS[3] sweep   KEYS[4] sweep:started
-- KEYS[5] sweep:name   KEYS[6] sweep:done   (includes/sweep.lua describes the sweep keys)
-- ARGV[1] the fence's job id   ARGV[2] claims NUL worker NUL (the fence, as held_item reads it)
-- ARGV[3] run_id   ARGV[4] name   ARGV[5] scope   ARGV[6] environment   ARGV[7] kind
-- ARGV[8] checksum   ARGV[9] expected ("" for None)   ARGV[10] now_ms
-- In this order (jobs_core.driver's `_sweep_start`): the fence does not hold, or its row is not
-- in run ARGV[3] now (`held_for_run`) -> nothing written;
-- another run's completed entry of the same (name, scope, environment, checksum) -> nothing
-- written, that entry answered (the last of the sweep's sweep:done range that is not this
-- run's); the run has an entry -> `completed` stays as it is, `failed` or `running` becomes
-- `running` with no error, no end and updated_at now (the rest kept); else a new entry.
-- Returns {0} (the fence failed), {2, run_id, entry} (blocked by that entry) or
-- {1, run_id, entry} (the run's entry as it is after).
--!include row.lua
--!include decimal.lua
--!include sweep.lua

if not held_for_run(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3]) then
  return { 0 }
end
local run_id, name, now = ARGV[3], ARGV[4], ARGV[10]
local head = sweep_head(name, ARGV[5], ARGV[6], ARGV[8])
local lo, hi = head_range(head)
-- The last two members: at most one is this run's own completed entry.
for _, member in ipairs(redis.call("ZREVRANGEBYLEX", KEYS[6], hi, lo, "LIMIT", 0, 2)) do
  local other = string.sub(member, #head + 16) -- head NUL 13 digits NUL
  if other ~= run_id then
    return { 2, other, redis.call("HGET", KEYS[3], other) }
  end
end
local raw = redis.call("HGET", KEYS[3], run_id)
if raw then
  local e = split(raw)
  if e[S_STATUS] ~= "completed" then
    e[S_STATUS], e[S_ERROR], e[S_FINISHED], e[S_UPDATED] = "running", "", "", now
    raw = join(e)
    redis.call("HSET", KEYS[3], run_id, raw)
  end
  return { 1, run_id, raw }
end
local e = {}
e[S_JOB], e[S_NAME], e[S_SCOPE], e[S_ENV] = ARGV[1], name, ARGV[5], ARGV[6]
e[S_KIND], e[S_CHECKSUM], e[S_STATUS] = ARGV[7], ARGV[8], "running"
e[S_BATCHES], e[S_ROWS], e[S_ERRORS], e[S_EXPECTED] = "0", "0", "0", ARGV[9]
e[S_CURSOR], e[S_ERROR], e[S_STARTED], e[S_UPDATED], e[S_FINISHED] = "", "", now, now, ""
raw = join(e)
redis.call("HSET", KEYS[3], run_id, raw)
redis.call("ZADD", KEYS[4], 0, ms13(now) .. Z .. run_id)
redis.call("ZADD", KEYS[5], 0, name .. Z .. ms13(now) .. Z .. run_id)
return { 1, run_id, raw }

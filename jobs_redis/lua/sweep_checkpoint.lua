-- sweep_checkpoint — record a step AND move the run's ledger entry by that step's batches (one,
-- or a backfill's window of several), in one script: fenced once, so a batch is never recorded
-- without being counted.
--
-- KEYS[1] job:state   KEYS[2] job:data   KEYS[3] sweep   KEYS[4] step:out   KEYS[5] step:index
--   (includes/sweep.lua and includes/durable.lua describe them)
-- ARGV[1] the fence's job id   ARGV[2] claims NUL worker NUL (the fence)   ARGV[3] run_id
-- ARGV[4] batch - span (the count the entry moves from) and ARGV[5] batch (the advance's last),
-- as decimal text   ARGV[6] rows   ARGV[7] errors
-- ARGV[8] cursor_json ("" for None)   ARGV[9] the advance's now_ms   ARGV[10] the step's name
-- ARGV[11] the step's recorded_at_ms   ARGV[12] the step's output_json
-- Lands only while the fence holds for run ARGV[3] (`held_for_run`): then the step is recorded
-- as step_put records it (the first record of a name stays) and the entry moves as
-- sweep_advance moves it (a replayed, overlapping or skipping window moves nothing).
-- Returns 1 when the fence held, else 0 (nothing written).
--!include row.lua
--!include decimal.lua
--!include sweep.lua

if not held_for_run(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3]) then
  return 0
end
local field = ARGV[3] .. Z .. ARGV[10]
if redis.call("HSETNX", KEYS[4], field, ARGV[11] .. Z .. ARGV[12]) == 1 then
  redis.call("ZADD", KEYS[5], 0, field)
end
sweep_move(KEYS[3], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9])
return 1

-- sweep_advance — record the batches up to ARGV[5] of run ARGV[3]'s running entry, once, fenced
-- on the run's claim.
--
-- KEYS[1] job:state   KEYS[2] job:data   KEYS[3] sweep   (includes/sweep.lua)
-- ARGV[1] the fence's job id   ARGV[2] claims NUL worker NUL (the fence)   ARGV[3] run_id
-- ARGV[4] batch - span (the count the entry moves from) and ARGV[5] batch (the advance's last),
-- as decimal text   ARGV[6] rows   ARGV[7] errors
-- ARGV[8] cursor_json ("" for None)   ARGV[9] now_ms
-- Moves only while the fence holds for run ARGV[3] (`held_for_run`) and the entry is `running`
-- with batches equal to ARGV[4] byte for byte (both a Python int's decimal text): a replayed,
-- overlapping or skipping window moves nothing.
-- rows and errors are added as decimal text (exact past 2^53).
-- Returns 1 when it moved, else 0.
--!include row.lua
--!include decimal.lua
--!include sweep.lua

if not held_for_run(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3]) then
  return 0
end
return sweep_move(KEYS[3], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9])

-- task_fire — fire one occurrence of a task: enqueue its job and move its mark together, fenced
-- on the watermark the firer read; or write nothing.
--
-- KEYS[1..5] job:state, job:data, job:live, due:<queue>, wake   (includes/enqueue.lua)
-- KEYS[6] task   hash task name -> mark (task_arm.lua)
-- KEYS[7..12] the accounting keys (includes/account.lua)
-- ARGV[1..8] the job, exactly as job_enqueue takes it (includes/enqueue.lua)
-- ARGV[9] task name   ARGV[10] expect_ms (the watermark the firer read)
-- ARGV[11] the mark after a fire, less its job id: watermark_ms NUL occurrence_ms NUL
-- ARGV[12] now_ms (fired_at_ms)
-- The fence: the stored mark's watermark field equals ARGV[10] byte for byte (both are a
-- Python int's decimal text). When it holds, the job is enqueued as job_enqueue does (inserted,
-- or deduped to the row holding its id or its live namespace; counted and woken alike) and the
-- mark becomes ARGV[11] .. the enqueue's id .. NUL .. ARGV[12].
-- Returns {answer, mark}: answer 0 when the fence refused (nothing written; mark is the stored
-- one, nil when the task was never armed), else the enqueue's answer (1: inserted as ARGV[1];
-- else the id it deduped to) with the new mark.
--!include row.lua
--!include account.lua
--!include enqueue.lua

local task, name = KEYS[6], ARGV[9]
local mark = redis.call("HGET", task, name)
if not mark or string.sub(mark, 1, string.find(mark, Z, 1, true) - 1) ~= ARGV[10] then
  return { 0, mark }
end
local got = enqueue()
local job_id = got == 1 and ARGV[1] or got
mark = ARGV[11] .. job_id .. Z .. ARGV[12]
redis.call("HSET", task, name, mark)
return { got, mark }

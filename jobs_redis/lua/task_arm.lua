-- task_arm — each named task's mark, storing a first one (watermark now_ms) where none is.
--
-- KEYS[1] task   hash task name -> mark: watermark_ms NUL fired_ms NUL fired_job_id NUL
--   fired_at_ms (the last three "" until the first fire)
-- ARGV[1] now_ms
-- ARGV[2 ..] the task names (distinct)
-- Atomic, so two callers arming one name at once store one mark and both answer it.
-- Returns one mark per name, in order.

local now = ARGV[1]
local out = {}
for i = 2, #ARGV do
  local mark = redis.call("HGET", KEYS[1], ARGV[i])
  if not mark then
    mark = now .. "\0\0\0"
    redis.call("HSET", KEYS[1], ARGV[i], mark)
  end
  out[i - 1] = mark
end
return out

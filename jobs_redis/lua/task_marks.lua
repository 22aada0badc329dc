-- task_marks — the stored marks of the named tasks (read only).
--
-- KEYS[1] task   hash task name -> mark (task_arm.lua)
-- ARGV the task names (distinct)
-- Returns one entry per name, in order: its mark, or nil where the task was never armed.

return redis.call("HMGET", KEYS[1], unpack(ARGV))

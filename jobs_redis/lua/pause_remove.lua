-- pause_remove — lift a pause on a queue, a job name or a scheduled task.
--
-- KEYS[1] pause:queue (set of queue names)   KEYS[2] pause:name (set of job names)
-- KEYS[3] pause:task (set of task names)
-- ARGV[1] kind: "queue", "name" or "task"   ARGV[2] the queue, job or task name
-- Returns 1 when the pause existed, else 0.

local sets = { queue = KEYS[1], name = KEYS[2], task = KEYS[3] }
return redis.call("SREM", sets[ARGV[1]], ARGV[2])

-- pause_add — pause a queue or a job name (the claim reads both sets), or a scheduled task (the
-- scheduler reads its set; no claim does).
--
-- KEYS[1] pause:queue (set of queue names)   KEYS[2] pause:name (set of job names)
-- KEYS[3] pause:task (set of task names)
-- ARGV[1] kind: "queue", "name" or "task"   ARGV[2] the queue, job or task name
-- Returns 1 when it was not paused before, else 0.

local sets = { queue = KEYS[1], name = KEYS[2], task = KEYS[3] }
return redis.call("SADD", sets[ARGV[1]], ARGV[2])

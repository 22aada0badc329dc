-- pause_list — every pause (read only).
--
-- KEYS[1] pause:queue (set of queue names)   KEYS[2] pause:name (set of job names)
-- KEYS[3] pause:task (set of task names)
-- No ARGV.
-- Returns {paused queues, paused names, paused tasks}, each an unordered list (the caller sorts).

return {
  redis.call("SMEMBERS", KEYS[1]),
  redis.call("SMEMBERS", KEYS[2]),
  redis.call("SMEMBERS", KEYS[3]),
}

-- pause_list — every pause (read only).
--
-- KEYS[1] pause:queue (set of queue names)   KEYS[2] pause:name (set of job names)
-- No ARGV.
-- Returns {paused queues, paused names}, each an unordered list (the caller sorts).

return { redis.call("SMEMBERS", KEYS[1]), redis.call("SMEMBERS", KEYS[2]) }

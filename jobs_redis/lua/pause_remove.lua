-- pause_remove — lift a pause on a queue or a job name.
--
-- KEYS[1] pause:queue (set of queue names)   KEYS[2] pause:name (set of job names)
-- ARGV[1] kind: "queue" or "name"   ARGV[2] the queue or job name
-- Returns 1 when the pause existed, else 0.

if ARGV[1] == "queue" then
  return redis.call("SREM", KEYS[1], ARGV[2])
end
return redis.call("SREM", KEYS[2], ARGV[2])

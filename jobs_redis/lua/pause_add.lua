-- pause_add — pause a queue or a job name (the claim reads both sets).
--
-- KEYS[1] pause:queue (set of queue names)   KEYS[2] pause:name (set of job names)
-- ARGV[1] kind: "queue" or "name"   ARGV[2] the queue or job name
-- Returns 1 when it was not paused before, else 0.

if ARGV[1] == "queue" then
  return redis.call("SADD", KEYS[1], ARGV[2])
end
return redis.call("SADD", KEYS[2], ARGV[2])

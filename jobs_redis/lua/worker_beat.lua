-- worker_beat — insert or refresh a worker's registry row.
--
-- KEYS[1] worker (hash worker id -> last_beat_ms NUL expires_at_ms NUL info_json)
-- ARGV[1] worker id   ARGV[2] registry row
-- Returns 1 when the row is new, else 0.

return redis.call("HSET", KEYS[1], ARGV[1], ARGV[2])

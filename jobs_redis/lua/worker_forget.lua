-- worker_forget — remove a worker's registry row, expired or not.
--
-- KEYS[1] worker (hash worker id -> registry row)
-- ARGV[1] worker id
-- Returns 1 when the row existed, else 0.

return redis.call("HDEL", KEYS[1], ARGV[1])

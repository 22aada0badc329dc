-- job_get_many — the stored parts of each asked row (read only).
--
-- KEYS[1] job:state   KEYS[2] job:data   KEYS[3] job:error   KEYS[4] job:progress
-- KEYS[5] job:result   KEYS[6] wait   KEYS[7] job:claimed   KEYS[8] job:attempts
--   (includes/attempts.lua) (includes/durable.lua: the wait of a parked row)
-- ARGV[1..n] ids
-- Returns flat, nine per id in order: state row, data row, last_error, progress_json,
-- result_json, wait, acts-for org, claimed_at_ms, attempt history; each is nil when absent (a
-- missing row has a nil state row; a row that is not parked with a wait has a nil wait; a row
-- that acts for no org, nil org; a row never claimed, no claim time and no history).

local out = {}
for i = 1, #ARGV do
  local id = ARGV[i]
  local b = 9 * (i - 1)
  out[b + 1] = redis.call("HGET", KEYS[1], id)
  out[b + 2] = redis.call("HGET", KEYS[2], id)
  out[b + 3] = redis.call("HGET", KEYS[3], id)
  out[b + 4] = redis.call("HGET", KEYS[4], id)
  out[b + 5] = redis.call("HGET", KEYS[5], id)
  out[b + 6] = redis.call("HGET", KEYS[6], id)
  out[b + 7] = redis.call("HGET", KEYS[2], id .. "\0a") -- acts-for (row.lua ACTS)
  out[b + 8] = redis.call("HGET", KEYS[7], id)
  out[b + 9] = redis.call("HGET", KEYS[8], id)
end
return out

-- job_watch — mark each existing row watched (its finish is PUBLISHed on the prefix's finish
-- channel: includes/flows.lua) and answer the asked rows as job_get_many does, atomically.
--
-- KEYS[1] job:state   KEYS[2] job:data   KEYS[3] job:error   KEYS[4] job:progress
-- KEYS[5] job:result   KEYS[6] wait   KEYS[7] job:claimed   KEYS[8] job:attempts
--   (includes/attempts.lua) (as job_get_many)
-- ARGV[1..n] ids
-- Returns what job_get_many returns for the same ids. The mark is the row's "w" flag, kept
-- until the row is removed or purged (it goes with the row).
--!include row.lua
--!include flows.lua

local out = {}
for i = 1, #ARGV do
  local id = ARGV[i]
  local b = 9 * (i - 1)
  local raw = redis.call("HGET", KEYS[1], id)
  if raw then
    local t = split(raw)
    flow_row(t)
    if not string.find(t[15], "w", 1, true) then
      t[15] = t[15] .. "w"
      raw = join(t)
      redis.call("HSET", KEYS[1], id, raw)
    end
  end
  out[b + 1] = raw
  out[b + 2] = redis.call("HGET", KEYS[2], id)
  out[b + 3] = redis.call("HGET", KEYS[3], id)
  out[b + 4] = redis.call("HGET", KEYS[4], id)
  out[b + 5] = redis.call("HGET", KEYS[5], id)
  out[b + 6] = redis.call("HGET", KEYS[6], id)
  out[b + 7] = redis.call("HGET", KEYS[2], id .. ACTS) -- acts-for
  out[b + 8] = redis.call("HGET", KEYS[7], id)
  out[b + 9] = redis.call("HGET", KEYS[8], id)
end
return out

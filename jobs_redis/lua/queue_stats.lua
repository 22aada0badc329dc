-- queue_stats — per queue, its rows by state and its oldest due ready row's run_at; reads only.
--
-- KEYS[1] queue:count (hash `queue NUL total|<final state>` -> rows, kept by the settling
--   scripts through includes/account.lua)
-- KEYS[3q - 1] due:<queue q>, KEYS[3q] parked:<queue q>, KEYS[3q + 1] lease:<queue q>, for the
--   queues in ARGV order
-- ARGV[1] now_ms   ARGV[2 ..] the queue names (those queue:count named when the caller read it)
-- Nothing here walks rows: ready = |due| - |parked| (due holds ready rows and parked rows with a
-- time, parked the latter), running = |lease|, the final states are counted, and parked is what
-- the total leaves. The oldest due ready row: per priority band of due, the first member not in
-- parked — O(bands + parked rows due before it) per queue.
-- Returns flat, per queue in ARGV order: total, completed, failed, dead, cancelled, ready,
-- running, oldest due ready run_at ("" for none).
--!include row.lua

local now = tonumber(ARGV[1])
local FINAL = { "completed", "failed", "dead", "cancelled" }
local out = {}
for q = 1, #ARGV - 1 do
  local queue = ARGV[q + 1]
  local due_key, parked_key, lease_key = KEYS[3 * q - 1], KEYS[3 * q], KEYS[3 * q + 1]
  out[#out + 1] = tonumber(redis.call("HGET", KEYS[1], queue .. Z .. "total") or "0")
  for _, s in ipairs(FINAL) do
    out[#out + 1] = tonumber(redis.call("HGET", KEYS[1], queue .. Z .. s) or "0")
  end
  out[#out + 1] = redis.call("ZCARD", due_key) - redis.call("ZCARD", parked_key)
  out[#out + 1] = redis.call("ZCARD", lease_key)
  local oldest = nil
  local first = redis.call("ZRANGE", due_key, 0, 0, "WITHSCORES")
  local p = nil
  if #first > 0 then
    p = math.floor(tonumber(first[2]) / B)
  end
  while p do
    local lo, hi = fmt(p * B), fmt(p * B + now)
    local offset = 0
    while true do
      local batch = redis.call("ZRANGEBYSCORE", due_key, lo, hi, "WITHSCORES", "LIMIT", offset, 64)
      local found = false
      for i = 1, #batch, 2 do
        if not redis.call("ZSCORE", parked_key, batch[i]) then
          local run_at = tonumber(batch[i + 1]) - p * B
          if oldest == nil or run_at < oldest then
            oldest = run_at
          end
          found = true
          break
        end
      end
      if found or #batch < 128 then
        break
      end
      offset = offset + 64
    end
    local nxt = redis.call("ZRANGEBYSCORE", due_key, fmt((p + 1) * B), "+inf", "WITHSCORES", "LIMIT", 0, 1)
    p = nil
    if #nxt > 0 then
      p = math.floor(tonumber(nxt[2]) / B)
    end
  end
  out[#out + 1] = oldest and fmt(oldest) or ""
end
return out

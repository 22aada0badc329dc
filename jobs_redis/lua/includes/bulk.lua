-- includes/bulk.lua — the items of an operator's bulk call and the walk over them (inlined after
-- row.lua, never run alone): job_cancel_many, job_promote, job_remove, job_requeue_many.
--
-- ARGV[1] now_ms ("" where unused)   ARGV[2] n, the number of ids
-- ARGV[1 + 2i] the id of item i, ARGV[2 + 2i] the 1-based index of its queue among the names
--   below ("0": the caller found no row)
-- ARGV[3 + 2n .. 2 + 2n + m] the m distinct queue names (m is the greatest queue index); each
--   one's keys follow the script's fixed KEYS
-- ARGV[3 + 2n + m ..] what the script itself takes beside the items (`bulk_extras`), if any
-- The caller read each row's queue before the call (KEYS must name a queue's keys up front); an
-- id purged and re-enqueued into another queue since then makes that read stale.

-- n, the number of items, and m, the number of queue names after them.
local function bulk_shape()
  local n, m = tonumber(ARGV[2]), 0
  for i = 1, n do
    m = math.max(m, tonumber(ARGV[2 + 2 * i]))
  end
  return n, m
end

-- The items, or nil when any row's queue is not the one the caller named (nothing written: the
-- caller reads the queues again and retries).
local function bulk_items(state_key)
  local n, m = bulk_shape()
  local ids, qs, names = {}, {}, {}
  for i = 1, n do
    ids[i] = ARGV[1 + 2 * i]
    qs[i] = tonumber(ARGV[2 + 2 * i])
  end
  for j = 3 + 2 * n, 2 + 2 * n + m do
    names[#names + 1] = ARGV[j]
  end
  for i = 1, n do
    local raw = redis.call("HGET", state_key, ids[i])
    if raw and (qs[i] == 0 or names[qs[i]] ~= split(raw)[10]) then
      return nil
    end
  end
  return ids, qs
end

-- Each item in order: "n" for an unknown id, else what `visit(id, t, q, i)` answers for its row
-- (t its split state row, read afresh: an id named twice sees what the first mention wrote; q
-- the index of its queue; i the item's position). Answers the characters joined, or "stale"
-- with nothing written.
local function bulk_answers(state_key, visit)
  local ids, qs = bulk_items(state_key)
  if not ids then
    return "stale"
  end
  local out = {}
  for i, id in ipairs(ids) do
    local raw = redis.call("HGET", state_key, id)
    out[i] = raw and visit(id, split(raw), qs[i], i) or "n"
  end
  return table.concat(out)
end

-- The arguments after the queue names (a script's own), as a list.
local function bulk_extras()
  local n, m = bulk_shape()
  local out = {}
  for j = 3 + 2 * n + m, #ARGV do
    out[#out + 1] = ARGV[j]
  end
  return out
end

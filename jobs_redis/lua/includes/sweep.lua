-- includes/sweep.lua — the sweep ledger's codec and indexes (inlined after row.lua and
-- decimal.lua, never run alone). Keys (hash tag `{p}` shared with every other key;
-- jobs_redis.keys.Keys):
--   {p}:sweep          hash run_id -> the entry: 16 NUL-joined fields, named below (an empty
--                      field is None: no stored value is empty — names and ids are non-empty,
--                      numbers are digits, "" is not JSON text)
--   {p}:sweep:started  zset, all scores 0, members `started_at_ms (13 digits) NUL run_id`: every
--                      entry, its lex order the listing's (a reverse range is newest first, ties
--                      by run_id bytes, which for UTF-8 is code-point order)
--   {p}:sweep:name     zset, all scores 0, members `name NUL started_at_ms (13) NUL run_id`: one
--                      declaration's entries are one lex range, in the same order
--   {p}:sweep:done     zset, all scores 0, members `name NUL scope NUL environment NUL checksum
--                      NUL finished_at_ms (13) NUL run_id`: the completed entries, one lex range
--                      per sweep, its last member the one finished last (ties: greater run_id)
-- Counts (batches, rows, errors, expected) are stored and moved as decimal TEXT, never as Lua
-- numbers: a double is exact only below 2^53, and a sweep's sums may pass it (`dec_add`,
-- includes/decimal.lua).

local S_JOB, S_NAME, S_SCOPE, S_ENV, S_KIND, S_CHECKSUM, S_STATUS = 1, 2, 3, 4, 5, 6, 7
local S_BATCHES, S_ROWS, S_ERRORS, S_EXPECTED, S_CURSOR, S_ERROR = 8, 9, 10, 11, 12, 13
local S_STARTED, S_UPDATED, S_FINISHED = 14, 15, 16

-- A time (decimal text below 2^42) as 13 digits, so lex order is time order. Text only.
local function ms13(ms)
  return string.rep("0", 13 - #ms) .. ms
end

-- The lex range of the members of zset entries that start with `head` (which holds no NUL).
local function head_range(head)
  return "[" .. head .. Z, "(" .. head .. "\1"
end

-- A ledger write's fence: the job row is held by that claim (`held_item`, row.lua) AND is in run
-- `run_id` now — job:data's first field, `run_id NUL ...` — so a run writes only its own entry.
local function held_for_run(state_key, data_key, id, meta, run_id)
  if not held_item(state_key, id, meta) then
    return false
  end
  local data = redis.call("HGET", data_key, id)
  return string.sub(data, 1, #run_id + 1) == run_id .. Z
end

-- Move run_id's entry to `batch` (by one batch, or a window of several): only a `running` entry
-- whose batches are `prev` (batch - span, computed by the caller) byte for byte (both a Python
-- int's decimal text), so a replayed, overlapping or skipping window moves nothing. rows
-- and errors are added as decimal text (exact past 2^53). The caller checked the fence.
-- Returns 1 when it moved, else 0.
local function sweep_move(sweep_key, run_id, prev, batch, rows, errors, cursor, now)
  local raw = redis.call("HGET", sweep_key, run_id)
  if not raw then
    return 0
  end
  local e = split(raw)
  if e[S_STATUS] ~= "running" or e[S_BATCHES] ~= prev then
    return 0
  end
  e[S_BATCHES], e[S_CURSOR], e[S_UPDATED] = batch, cursor, now
  e[S_ROWS] = dec_add(e[S_ROWS], rows)
  e[S_ERRORS] = dec_add(e[S_ERRORS], errors)
  redis.call("HSET", sweep_key, run_id, join(e))
  return 1
end

-- The sweep:done head of a sweep: what a completed entry of another run must share to block.
local function sweep_head(name, scope, environment, checksum)
  return name .. Z .. scope .. Z .. environment .. Z .. checksum
end

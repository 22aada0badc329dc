-- includes/row.lua — the row codec every script shares (inlined by the loader, never run alone).
--
-- A job's mutable row lives in the hash KEYS job:state as ONE string of 13 fields joined by NUL
-- (no stored string may hold NUL, so the separator is unambiguous):
--   1 state  2 claims  3 claimed_by  4 attempt  5 lease_until_ms  6 run_at_ms  7 finished_at_ms
--   8 priority  9 max_attempts  10 queue  11 name  12 tenant_id  13 idempotency_key
-- An empty field means None (no stored value is empty: ids and names are non-empty, numbers are
-- digits). Fields 11..13 are the idempotency namespace, so the row's tail IS the job:live field
-- — for a row of 13 fields; a row of the flow family has four more (includes/flows.lua).
-- The fence is a prefix test: "running" NUL claims NUL worker NUL.
-- Numbers are formatted with %d before they are stored or sent: a Lua number (a double) would
-- otherwise print as 4.398e+12 and lose digits.

local Z = "\0"
-- Due scores pack priority and run_at: priority * 2^42 + run_at_ms < 2^49, exact in a double.
local B = 4398046511104

local function fmt(n)
  return string.format("%d", n)
end

local function split(raw)
  local t, i, n = {}, 1, 0
  while true do
    local j = string.find(raw, Z, i, true)
    n = n + 1
    if not j then
      t[n] = string.sub(raw, i)
      return t
    end
    t[n] = string.sub(raw, i, j - 1)
    i = j + 1
  end
end

-- A job:data row (run_id NUL created_at_ms NUL enqueued_by NUL input_json NUL traceparent) with
-- all five fields: a row stored before traceparent was kept has the first four.
local function data_row(raw)
  -- Plain finds: a Lua 5.1 pattern cannot hold a NUL (gsub would count every position).
  local nuls, i = 0, 1
  while true do
    local j = string.find(raw, Z, i, true)
    if not j then
      break
    end
    nuls = nuls + 1
    i = j + 1
  end
  if nuls == 3 then
    return raw .. Z
  end
  return raw
end

-- -- acts-for --
-- A new row's data row, as the caller sends it, may carry a sixth field: the org the row acts
-- for. It is stored apart, in job:data under the field `id NUL "a"` (an id never holds NUL), so
-- every reader of the data row still meets its five fields; a deleted row's goes with it
-- (durable.lua drop_row).
local ACTS = Z .. "a"

-- The data row to store and the org (nil: none) of a sent data row.
local function data_parts(data)
  local i, nuls = 1, 0
  while true do
    local j = string.find(data, Z, i, true)
    if not j then
      return data, nil
    end
    nuls = nuls + 1
    if nuls == 5 then
      return string.sub(data, 1, j - 1), string.sub(data, j + 1)
    end
    i = j + 1
  end
end

-- Store a new row's sent data row (and its org, when it has one).
local function put_data(data_key, id, data)
  local row, org = data_parts(data)
  redis.call("HSET", data_key, id, row)
  if org then
    redis.call("HSET", data_key, id .. ACTS, org)
  end
end

-- The row's 13 fields, or 17 for a row of the flow family (includes/flows.lua): whatever `t` holds.
local function join(t)
  return table.concat(t, Z)
end

local function ns_of(t)
  return t[11] .. Z .. t[12] .. Z .. t[13]
end

local function score_of(priority, run_at)
  return fmt(tonumber(priority) * B + tonumber(run_at))
end

local function is_live(state)
  return state == "ready" or state == "running" or state == "parked"
end

-- A settle item travels as two ARGV: the id, and `meta` = claims NUL worker NUL the rest.
-- Answers the fields of `raw` (the row as read; false or nil: none) while that fence holds
-- (else nil), and the rest of `meta` split.
local function held_row(raw, meta)
  local j = string.find(meta, Z, string.find(meta, Z, 1, true) + 1, true)
  local rest = split(string.sub(meta, j + 1))
  if not raw then
    return nil, rest
  end
  local pre = "running" .. Z .. string.sub(meta, 1, j)
  if string.sub(raw, 1, #pre) ~= pre then
    return nil, rest
  end
  return split(raw), rest
end

-- The hot paths (the claim's rows, the ack's) read a row with ONE `string.match` rather than
-- `split`: every call of a C function from a script costs this Redis about 750 instructions,
-- and `split` makes two a field (a 13-field row: about 33,000 instructions; a match of it:
-- about 20,000, fewer when it captures fewer fields). A pattern names NUL `%z`.

-- The same for row `id`, read from `state_key`.
local function held_item(state_key, id, meta)
  return held_row(redis.call("HGET", state_key, id), meta)
end

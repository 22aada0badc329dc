-- job_list — one bounded walk of the listing order, newest first by (created_at_ms, id), id by
-- code point; reads only.
--
-- KEYS[1] job:created (zset, every score 0, member `%013d created_at_ms` .. id: its lex order,
--   byte by byte, IS (created_at_ms, id by code point) order)   KEYS[2] job:state
-- KEYS[3] job:data (only its acts-for fields are read: row.lua ACTS)
-- ARGV[1] the member to start strictly below ("" for the newest)   ARGV[2] limit
-- ARGV[3] scan (the most rows examined)   ARGV[4] the states kept, NUL-joined ("" for any)
-- ARGV[5] queue, ARGV[6] name, ARGV[7] tenant_id, ARGV[8] parent_id, ARGV[9] batch_id ("" for
--   no filter: none of them is empty). The flow links are state-row fields 16 and 17
--   (includes/flows.lua), so the walk filters on them as on the others, from the rows it reads
--   anyway: no index of its own to keep.
-- ARGV[10] acts_for ("" for no filter): the org a row acts for, read for the batch's rows only
--   when asked (one HMGET per batch), else for the taken rows alone.
-- Walks from ARGV[1] downward, examining rows one by one until `limit` rows matched or `scan`
-- rows were examined: O(log N + scan), whatever the filter.
-- Returns {taken, last}: taken is flat, per matching row in walk order, its member, state row
-- and acts-for org ("" for none); last is the member of the last row examined when a row follows it, else "".
--!include row.lua

local limit, scan = tonumber(ARGV[2]), tonumber(ARGV[3])
local states = nil
if ARGV[4] ~= "" then
  states = {}
  for _, s in ipairs(split(ARGV[4])) do
    states[s] = true
  end
end
local queue, name, tenant = ARGV[5], ARGV[6], ARGV[7]
local parent, batch_id = ARGV[8], ARGV[9]
local acts = ARGV[10]
local function acts_of(ids)
  local fields = {}
  for i = 1, #ids do
    fields[i] = ids[i] .. ACTS
  end
  return redis.call("HMGET", KEYS[3], unpack(fields))
end

local max = "+"
if ARGV[1] ~= "" then
  max = "(" .. ARGV[1]
end
local taken, n_taken, examined = {}, 0, 0
local last, more = "", false
while true do
  local want = math.min(scan - examined, 256)
  -- One member past the batch tells whether a row follows the last one examined.
  local batch = redis.call("ZREVRANGEBYLEX", KEYS[1], max, "-", "LIMIT", 0, want + 1)
  local n = math.min(#batch, want)
  if n == 0 then
    break
  end
  local ids = {}
  for i = 1, n do
    ids[i] = string.sub(batch[i], 14)
  end
  local rows = redis.call("HMGET", KEYS[2], unpack(ids))
  local orgs = nil
  if acts ~= "" then
    orgs = acts_of(ids)
  end
  local stopped = false
  for i = 1, n do
    examined = examined + 1
    last = batch[i]
    local raw = rows[i]
    if raw then
      local t = split(raw)
      if (states == nil or states[t[1]])
        and (queue == "" or t[10] == queue)
        and (name == "" or t[11] == name)
        and (tenant == "" or t[12] == tenant)
        and (parent == "" or t[16] == parent)
        and (batch_id == "" or t[17] == batch_id)
        and (orgs == nil or orgs[i] == acts)
      then
        n_taken = n_taken + 1
        taken[3 * n_taken - 2] = batch[i]
        taken[3 * n_taken - 1] = raw
        taken[3 * n_taken] = orgs and orgs[i] or ids[i]
      end
    end
    if n_taken >= limit or examined >= scan then
      more = i < #batch
      stopped = true
      break
    end
  end
  if stopped then
    break
  end
  if #batch <= want then
    break -- the walk reached the oldest row
  end
  max = "(" .. last
end
if not more then
  last = ""
end
if acts == "" and n_taken > 0 then
  -- The taken rows' orgs, in one read (each slot held the row's id until now).
  local ids = {}
  for i = 1, n_taken do
    ids[i] = taken[3 * i]
  end
  local orgs = acts_of(ids)
  for i = 1, n_taken do
    taken[3 * i] = orgs[i] or ""
  end
end
return { taken, last }

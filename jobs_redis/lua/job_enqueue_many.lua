-- job_enqueue_many — job_enqueue for each record in order, as if one after another.
--
-- A later record dedupes against an earlier one of the same call (by id, then by namespace).
-- KEYS[1] job:state   KEYS[2] job:data   KEYS[3] job:live   KEYS[4] wake   (see job_enqueue)
-- KEYS[4 + q] due:<queue q> for each distinct queue q = 1..m of the batch
-- KEYS[#KEYS - 5 .. #KEYS] the accounting keys (includes/account.lua): new rows are listed and
--   counted
-- ARGV[1] n, the number of records
-- ARGV[1 + i] record i, packed in one argument (packing seven arguments per record cost the
--   client more than the whole script costs the server):
--   "<score> <q> <due> <id bytes> <state bytes> <namespace bytes> <tail bytes> " id state_row
--   data_row (its org, when it acts for one, a sixth field: row.lua put_data)
--   score: the due score; q: the index of its queue below; due: "1" when due at creation (may
--   wake) else "0"; the byte lengths cut the id and the state row out, and the namespace ends
--   the state row but for its last <tail bytes> (0, or a flow row's four more fields:
--   includes/flows.lua).
-- ARGV[2 + n + 3(q-1) ..] per queue q: queue name, wake channel, wake slot
-- Returns one string: per record, in order, "" when inserted or the id it dedupes to, joined
-- by NUL (one bulk reply parses far faster than a thousand).
--!include row.lua
--!include account.lua

acc_open(#KEYS - 5)
acc_fresh(KEYS[1])
local n = tonumber(ARGV[1])
local ids, nss, states, datas, scores, qs, dues = {}, {}, {}, {}, {}, {}, {}
for i = 1, n do
  local blob = ARGV[1 + i]
  local score, q, due, li, ls, ln, lt, p =
    string.match(blob, "^(%d+) (%d+) (%d) (%d+) (%d+) (%d+) (%d+) ()")
  li, ls, ln, lt = tonumber(li), tonumber(ls), tonumber(ln), tonumber(lt)
  local s0 = p + li
  local state = string.sub(blob, s0, s0 + ls - 1)
  ids[i] = string.sub(blob, p, s0 - 1)
  states[i] = state
  nss[i] = string.sub(state, ls - ln - lt + 1, ls - lt)
  datas[i] = string.sub(blob, s0 + ls)
  scores[i] = score
  qs[i] = tonumber(q)
  dues[i] = due
end
local found = redis.call("HMGET", KEYS[1], unpack(ids))
local holders = redis.call("HMGET", KEYS[3], unpack(nss))

local out = {}
local new_ids, new_ns = {}, {}
local state_args, data_args, live_args = {}, {}, {}
local acts_args = {} -- acts-for: id NUL "a", org (row.lua put_data)
local due_args, wake = {}, {}
for i = 1, n do
  local id, ns = ids[i], nss[i]
  if found[i] or new_ids[id] then
    out[i] = id
  else
    local holder = new_ns[ns] or holders[i]
    if holder then
      out[i] = holder
    else
      new_ids[id] = true
      new_ns[ns] = id
      out[i] = ""
      local s = #state_args
      state_args[s + 1] = id
      state_args[s + 2] = states[i]
      data_args[s + 1] = id
      local row, org = data_parts(datas[i])
      data_args[s + 2] = row
      if org then
        acts_args[#acts_args + 1] = id .. ACTS
        acts_args[#acts_args + 1] = org
      end
      live_args[s + 1] = ns
      live_args[s + 2] = id
      local q = qs[i]
      local z = due_args[q]
      if not z then
        z = {}
        due_args[q] = z
      end
      z[#z + 1] = scores[i]
      z[#z + 1] = id
      if dues[i] == "1" then
        wake[q] = true
      end
      -- accounting
      count_new(id, datas[i], ARGV[2 + n + 3 * (q - 1)])
    end
  end
end

if #state_args > 0 then
  redis.call("HSET", KEYS[1], unpack(state_args))
  redis.call("HSET", KEYS[2], unpack(data_args))
  if #acts_args > 0 then
    redis.call("HSET", KEYS[2], unpack(acts_args))
  end
  redis.call("HSET", KEYS[3], unpack(live_args))
end
local m = #KEYS - 10
for q = 1, m do
  local z = due_args[q]
  if z then
    redis.call("ZADD", KEYS[4 + q], unpack(z))
  end
  if wake[q] then
    -- At most one PUBLISH per queue per wake slot.
    local b = 2 + n + 3 * (q - 1)
    local queue, slot = ARGV[b], ARGV[b + 2]
    if redis.call("HGET", KEYS[4], queue) ~= slot then
      redis.call("HSET", KEYS[4], queue, slot)
      redis.call("PUBLISH", ARGV[b + 1], queue)
    end
  end
end
acc_close()
return table.concat(out, Z)

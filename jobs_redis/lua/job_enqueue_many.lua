-- job_enqueue_many — job_enqueue for each record in order, as if one after another.
--
-- A later record dedupes against an earlier one of the same call (by id, then by namespace).
-- KEYS[1] job:state   KEYS[2] job:data   KEYS[3] job:live   KEYS[4] wake   (see job_enqueue)
-- KEYS[4 + q] due:<queue q> for each distinct queue q = 1..m of the batch
-- KEYS[#KEYS - 5 .. #KEYS] the accounting keys (includes/account.lua): new rows are listed and
--   counted
-- ARGV[1] n, the number of records; ARGV[2] "1" when no row has any of their ids (the facade
--   made them for this call, never sent: `NewJobs.take_fresh`), so they are not looked up, else
--   "0"; ARGV[3] packs, the number of packs they come in
-- ARGV[4 .. 3 + packs] the records, in order, each pack several of them back to back (one argument
--   a record cost the server more than the script's own parsing, and seven a record cost the
--   client more than the whole script): a record is a 23-byte head, then created id state_row
--   data_row (its org, when it acts for one, a sixth field: row.lua put_data).
--   The head's numbers are 7 bits a byte, high first (`string.byte` reads them without making
--   a string; text numbers cut out with captures cost the script more than the rest of its
--   parsing): q (2 bytes) the index of its queue below, due (1) 1 when due at creation (may
--   wake) else 0, score (7) the due score, tail (2) the bytes after the namespace in the state
--   row (0, or a flow row's four more fields: includes/flows.lua), then the byte lengths of the
--   id (2), the state row (2), the namespace that ends it but for its tail (2), the org ending
--   the data row after its NUL (2; 0: none) and the data row, org included (3). created:
--   created_at_ms zero-padded to 13 digits, so created .. id is the row's job:created member
--   (includes/account.lua).
-- ARGV[4 + packs + 3(q-1) ..] per queue q: queue name, wake channel, wake slot
-- Returns one string: per record, in order, "" when inserted or the id it dedupes to, joined
-- by NUL (one bulk reply parses far faster than a thousand).
--!include row.lua
--!include account.lua

acc_open(#KEYS - 5)
acc_fresh(KEYS[1])
local n, fresh, packs = tonumber(ARGV[1]), ARGV[2] == "1", tonumber(ARGV[3])
local ids, nss, states, datas, orgs, made, scores, qs, dues = {}, {}, {}, {}, {}, {}, {}, {}, {}
local byte, sub = string.byte, string.sub
local i = 0
for a = 4, 3 + packs do
  local pack = ARGV[a]
  local p = 1
  while p <= #pack do
    i = i + 1
    local q1, q2, due, s1, s2, s3, s4, s5, s6, s7, t1, t2, i1, i2, l1, l2, n1, n2, o1, o2, d1, d2,
      d3 = byte(pack, p, p + 22)
    local lt, ls, lo = t1 * 128 + t2, l1 * 128 + l2, o1 * 128 + o2
    local e = p + 35 + i1 * 128 + i2 -- the id's last byte
    local state = sub(pack, e + 1, e + ls)
    made[i] = sub(pack, p + 23, e)
    ids[i] = sub(pack, p + 36, e)
    states[i] = state
    nss[i] = sub(state, ls - n1 * 128 - n2 - lt + 1, ls - lt)
    local d0 = e + ls -- the data row starts after d0
    p = d0 + (d1 * 128 + d2) * 128 + d3 + 1
    if lo == 0 then
      datas[i] = sub(pack, d0 + 1, p - 1)
    else
      datas[i] = sub(pack, d0 + 1, p - lo - 2)
      orgs[i] = sub(pack, p - lo, p - 1)
    end
    scores[i] = (((((s1 * 128 + s2) * 128 + s3) * 128 + s4) * 128 + s5) * 128 + s6) * 128 + s7
    qs[i] = q1 * 128 + q2
    dues[i] = due
  end
end
local found = fresh and {} or redis.call("HMGET", KEYS[1], unpack(ids))
local holders = redis.call("HMGET", KEYS[3], unpack(nss))

local out = {}
local listed, totals = ACC.new, {}
local new_ids, new_ns = {}, {}
local state_args, data_args, live_args = {}, {}, {}
local acts_args = {} -- acts-for: id NUL "a", org (row.lua put_data)
local due_args, wake = {}, {}
-- Counters instead of `#t`, which Lua 5.1 finds by a binary search each time.
local w, a, l = 0, 0, #listed
-- A due score goes to ZADD as text made once per run of equal scores (a batch's are usually
-- all one): a Lua number argument costs the server a printf("%.17g") each.
local last_score, score_text
for i = 1, n do
  local id, ns = ids[i], nss[i]
  if found[i] or new_ids[id] then
    out[i] = id
  else
    local holder = new_ns[ns] or holders[i]
    if holder then
      out[i] = holder
    else
      if not fresh then
        new_ids[id] = true
      end
      new_ns[ns] = id
      out[i] = ""
      state_args[w + 1] = id
      state_args[w + 2] = states[i]
      data_args[w + 1] = id
      data_args[w + 2] = datas[i]
      live_args[w + 1] = ns
      live_args[w + 2] = id
      w = w + 2
      local org = orgs[i]
      if org then
        acts_args[a + 1] = id .. ACTS
        acts_args[a + 2] = org
        a = a + 2
      end
      local q = qs[i]
      local z = due_args[q]
      if not z then
        z = {}
        due_args[q] = z
      end
      local c = (totals[q] or 0) + 1
      totals[q] = c
      local score = scores[i]
      if score ~= last_score then
        last_score, score_text = score, string.format("%.0f", score)
      end
      z[2 * c - 1] = score_text
      z[2 * c] = id
      if dues[i] == 1 then
        wake[q] = true
      end
      -- accounting: count_new's listing entry, its totals summed per queue
      listed[l + 1] = "0"
      listed[l + 2] = made[i]
      l = l + 2
    end
  end
end
for q, total in pairs(totals) do
  row_delta(ARGV[4 + packs + 3 * (q - 1)], "total", total)
end

if w > 0 then
  redis.call("HSET", KEYS[1], unpack(state_args))
  redis.call("HSET", KEYS[2], unpack(data_args))
  if a > 0 then
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
    local b = 4 + packs + 3 * (q - 1)
    local queue, slot = ARGV[b], ARGV[b + 2]
    if redis.call("HGET", KEYS[4], queue) ~= slot then
      redis.call("HSET", KEYS[4], queue, slot)
      redis.call("PUBLISH", ARGV[b + 1], queue)
    end
  end
end
acc_close()
return table.concat(out, Z)

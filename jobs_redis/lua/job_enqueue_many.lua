-- job_enqueue_many — job_enqueue for each record in order, as if one after another.
--
-- A later record dedupes against an earlier one of the same call (by id, then by namespace).
-- KEYS[1] job:state   KEYS[2] job:data   KEYS[3] job:live   KEYS[4] wake   (see job_enqueue)
-- KEYS[4 + q] due:<queue q> for each distinct queue q = 1..m of the batch
-- KEYS[#KEYS - 5 .. #KEYS] the accounting keys (includes/account.lua): new rows are listed and
--   counted
-- ARGV[1] n, the number of records; ARGV[2] "1" when no row has any of their ids (the facade
--   made them for this call, never sent: `NewJobs.take_fresh`), so they are not looked up, else
--   "0"; ARGV[3] the head every record shares, or "" when each record carries its own;
--   ARGV[4] k, the number of records that act for an org
-- ARGV[5 ..] the records, in order, each as the arguments id, state_row, data_row, namespace,
--   created .. id, and its head when ARGV[3] is "": the very strings the writes take, so the
--   script makes no string of its own (this Redis hashes every byte of a string it makes; a
--   record cut out of a larger argument had its bytes made twice). created: created_at_ms
--   zero-padded to 13 digits, so created .. id is the row's job:created member
--   (includes/account.lua). A head is 10 bytes of 7-bit numbers, high first, that
--   `string.byte` reads without making a string: q (2) the index of its queue below, due (1)
--   1 when due at creation (may wake) else 0, score (7) the due score.
-- then k pairs: the number of a record (1-based, ascending) and the org it acts for (stored
--   apart from the data row: row.lua put_data)
-- then per queue q: queue name, wake channel, wake slot
-- Returns one string: per record, in order, "" when inserted or the id it dedupes to, joined
-- by NUL (one bulk reply parses far faster than a thousand).
--!include row.lua
--!include account.lua

acc_open(#KEYS - 5)
acc_fresh(KEYS[1])
local A = ARGV
local n, fresh, shared, k = tonumber(A[1]), A[2] == "1", A[3], tonumber(A[4])
local per = shared == "" and 6 or 5 -- arguments a record
local last = 4 + per * n -- the last record's last argument
local qbase = last + 2 * k + 1 -- the first queue's name
local byte = string.byte

-- The head's numbers: q, due, score.
local function head(h)
  local q1, q2, due, s1, s2, s3, s4, s5, s6, s7 = byte(h, 1, 10)
  return q1 * 128 + q2, due,
    (((((s1 * 128 + s2) * 128 + s3) * 128 + s4) * 128 + s5) * 128 + s6) * 128 + s7
end

local nss, ids = {}, {}
local i = 0
for b = 5, last, per do
  i = i + 1
  nss[i] = A[b + 3]
end
if not fresh then
  i = 0
  for b = 5, last, per do
    i = i + 1
    ids[i] = A[b]
  end
end
local found = fresh and {} or redis.call("HMGET", KEYS[1], unpack(ids))
local holders = redis.call("HMGET", KEYS[3], unpack(nss))

local orgs = {}
for b = last + 1, qbase - 1, 2 do
  orgs[tonumber(A[b])] = A[b + 1]
end

local out, deduped = {}, false
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
local q, due, score
-- The queue of the last record written, its ZADD arguments and their count (kept in `totals`
-- while another queue's records are written); the last queue marked to wake.
local zq, z, c, wq
if per == 5 then
  q, due, score = head(shared)
end
i = 0
for b = 5, last, per do
  i = i + 1
  local id, ns = A[b], A[b + 3]
  if found[i] or new_ids[id] then
    out[i], deduped = id, true
  else
    local holder = new_ns[ns] or holders[i]
    if holder then
      out[i], deduped = holder, true
    else
      if not fresh then
        new_ids[id] = true
      end
      new_ns[ns] = id
      state_args[w + 1] = id
      state_args[w + 2] = A[b + 1]
      data_args[w + 1] = id
      data_args[w + 2] = A[b + 2]
      live_args[w + 1] = ns
      live_args[w + 2] = id
      listed[l + 1] = "0"
      listed[l + 2] = A[b + 4]
      w, l = w + 2, l + 2
      local org = orgs[i]
      if org then
        acts_args[a + 1] = id .. ACTS
        acts_args[a + 2] = org
        a = a + 2
      end
      if per == 6 then
        q, due, score = head(A[b + 5])
      end
      if q ~= zq then
        if zq then
          totals[zq] = c
        end
        zq, z, c = q, due_args[q], totals[q] or 0
        if not z then
          z = {}
          due_args[q] = z
        end
      end
      c = c + 1
      if score ~= last_score then
        last_score, score_text = score, string.format("%.0f", score)
      end
      z[2 * c - 1] = score_text
      z[2 * c] = id
      if due == 1 and wq ~= q then
        wake[q], wq = true, q
      end
    end
  end
end
if zq then
  totals[zq] = c
end
for q, total in pairs(totals) do
  row_delta(A[qbase + 3 * (q - 1)], "total", total)
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
    local b = qbase + 3 * (q - 1)
    local queue, slot = A[b], A[b + 2]
    if redis.call("HGET", KEYS[4], queue) ~= slot then
      redis.call("HSET", KEYS[4], queue, slot)
      redis.call("PUBLISH", A[b + 1], queue)
    end
  end
end
acc_close()
if not deduped then
  -- Every record inserted: n empty answers.
  return string.rep(Z, n - 1)
end
for j = 1, n do
  out[j] = out[j] or ""
end
return table.concat(out, Z)

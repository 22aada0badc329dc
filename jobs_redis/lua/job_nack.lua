-- job_nack — give each held job back as its kind says (jobs_memory.driver.nacked); fenced per item.
--
-- KEYS[1] job:state   KEYS[2] job:live   KEYS[3] job:error   KEYS[4] job:progress
-- KEYS[2 + 3q] due:<queue q>, KEYS[3 + 3q] parked:<queue q>, KEYS[4 + 3q] lease:<queue q>,
--   for each distinct queue q of the items
-- KEYS[#KEYS - 7] finished:dead, KEYS[#KEYS - 6] finished:failed (zsets id by finished_at_ms)
-- KEYS[#KEYS - 5 .. #KEYS] the accounting keys (includes/account.lua): each landed nack moves
--   its `nack_outcome` counter, and a finishing one its queue's count of the final state
-- ARGV[2i - 1] the id of item i, ARGV[2i] its meta: claims NUL worker NUL kind NUL now_ms NUL
--   run_at_ms ("" for none) NUL "1" when dead_letter else "0" NUL queue index q ("0" when
--   the row is unknown) NUL progress_json ("" for none) NUL error ("" for none, else
--   "=" .. text: an empty error text is a value) NUL, for a park with a wait, its event name
--   ("" for none) NUL its since_ms NUL its match lines (jobs_redis.match) NUL its match_json
--   NUL its tenant ("" for none) NUL its until_ms ("" for none) NUL, for a park with a join
--   (flows), the number of its job ids ("" for none) NUL each id, and last NUL the attempt's
--   JSON members after settled_at (jobs_core.attempts: outcome and error, made in Python)
-- job:claimed, job:attempts anywhere before the finished and accounting keys
--   (includes/attempts.lua: each landed nack ends its claim)
-- join:waiters, join:pending, job:data anywhere before the finished and accounting keys
--   (includes/flows.lua: a park's join, and the finish rule of fail and refuse)
-- event, event:name, wait, wait:index anywhere before the finished and accounting keys
--   (includes/durable.lua: a park's wait is stored with the row, or met at once)
-- Kinds: retry (ready at run_at, attempt spent, last_error = error), fail (dead or failed,
-- finished now, last_error = error), park (parked until run_at or an event, attempt given back),
-- shed and interrupt (ready at run_at or now, attempt given back), refuse (failed, finished now,
-- last_error = error, attempt given back). Every kind drops the lease; a given progress is kept.
-- Returns one string, a character per item: "1" landed, "0" the fence no longer held.
--!include row.lua
--!include match.lua
--!include durable.lua
--!include account.lua
--!include flows.lua
--!include attempts.lua

local FIN = acc_open(#KEYS - 5) - 1
local out = {}
local KINDS = { retry = 1, fail = 1, park = 1, shed = 1, interrupt = 1, refuse = 1 }
local n = #ARGV / 2
-- A script is not rolled back on error: refuse a bad kind before the first write.
for i = 1, n do
  local meta = ARGV[2 * i]
  local a = string.find(meta, Z, string.find(meta, Z, 1, true) + 1, true)
  local kind = string.sub(meta, a + 1, string.find(meta, Z, a + 1, true) - 1)
  if not KINDS[kind] then
    return redis.error_reply("ERR job_nack: unknown kind " .. kind)
  end
end
for i = 1, n do
  local id = ARGV[2 * i - 1]
  local t, rest = held_item(KEYS[1], id, ARGV[2 * i])
  if t then
    local kind, now, run_at, dead_letter = rest[1], rest[2], rest[3], rest[4]
    attempt_end(id, t, now, rest[#rest]) -- before a kind gives the attempt back
    local q, progress, err = tonumber(rest[5]), rest[6], rest[7]
    local due_key, parked_key = KEYS[2 + 3 * q], KEYS[3 + 3 * q]
    t[5] = ""
    redis.call("ZREM", KEYS[4 + 3 * q], id)
    local set_error, finished, due = false, false, false
    local flags = nil
    if kind == "retry" then
      t[1] = "ready"
      t[6] = run_at
      set_error, due = true, true
    elseif kind == "fail" then
      t[1] = "failed"
      if dead_letter == "1" then
        t[1] = "dead"
      end
      t[7] = now
      set_error, finished = true, true
      flags = flow_flags(t)
    elseif kind == "park" then
      t[1] = "parked"
      t[6] = run_at
      t[4] = fmt(tonumber(t[4]) - 1)
      if (t[14] or "") ~= "" then
        flow_drop(id) -- parked again: its old join moves it no more
      end
      local waits = rest[8] ~= ""
      if rest[14] ~= "" then
        local deps = {}
        for j = 1, tonumber(rest[14]) do
          deps[j] = rest[14 + j]
        end
        flow_row(t)
        local pending, failed, _, live = flow_count(id, t, deps)
        t[14] = join_format(#deps, pending, failed, "always")
        if pending == 0 then
          -- Every dependency finished before the park (a gather of children already done):
          -- ready now, and its queue is told so, as a release would tell it.
          t[1] = "ready"
          t[6] = now
          due = true
          flow_wake(t[10])
        else
          flow_edges(id, t, live)
          if run_at ~= "" then
            due = true
            redis.call("ZADD", parked_key, score_of(t[8], run_at), id)
          end
        end
      elseif waits and park_wait(id, rest[8], rest[9], rest[10], rest[11], rest[12], rest[13], now) then
        -- The event came before the wait was stored: the run goes on at once.
        t[1] = "ready"
        t[6] = now
        due = true
      elseif run_at ~= "" then
        due = true
        redis.call("ZADD", parked_key, score_of(t[8], run_at), id)
      end
    elseif kind == "shed" or kind == "interrupt" then
      t[1] = "ready"
      if run_at == "" then
        run_at = now
      end
      t[6] = run_at
      t[4] = fmt(tonumber(t[4]) - 1)
      due = true
    else -- refuse
      t[1] = "failed"
      t[7] = now
      t[4] = fmt(tonumber(t[4]) - 1)
      set_error, finished = true, true
      flags = flow_flags(t)
    end
    redis.call("HSET", KEYS[1], id, join(t))
    if due then
      redis.call("ZADD", due_key, score_of(t[8], t[6]), id)
    end
    if finished then
      redis.call("HDEL", KEYS[2], ns_of(t))
      if t[1] == "dead" then
        redis.call("ZADD", KEYS[FIN - 1], now, id)
      else
        redis.call("ZADD", KEYS[FIN], now, id)
      end
    end
    if set_error then
      if err == "" then
        redis.call("HDEL", KEYS[3], id)
      else
        redis.call("HSET", KEYS[3], id, string.sub(err, 2))
      end
    end
    if progress ~= "" then
      redis.call("HSET", KEYS[4], id, progress)
    end
    -- accounting
    count_settle(t, now, nack_outcome(kind, dead_letter))
    if finished then
      count_rows(id, t[10], t[1], 1)
      flow_finished(id, flags, false, now)
    end
    out[i] = "1"
  else
    out[i] = "0"
  end
end
acc_close()
return table.concat(out)

-- includes/enqueue.lua — one job's enqueue (inlined after row.lua and account.lua, never run
-- alone): job_enqueue, and task_fire once its fence holds. Both scripts lay out the head of
-- their KEYS and ARGV alike, so the enqueue reads them in place:
--
-- KEYS[1] job:state   hash id -> state row (includes/row.lua)
-- KEYS[2] job:data    hash id -> run_id NUL created_at_ms NUL enqueued_by NUL input_json NUL
--   traceparent ("" for none; rows stored by older versions lack the field: row.lua data_row);
--   and id NUL "a" -> the org the row acts for, when it has one (row.lua put_data)
-- KEYS[3] job:live    hash namespace (name NUL tenant NUL key) -> id of the live row holding it
-- KEYS[4] due:<queue> zset id by priority * 2^42 + run_at_ms (ready rows, parked-with-time rows)
-- KEYS[5] wake        hash queue -> the wake slot that last published
-- KEYS[#KEYS - 5 .. #KEYS] the accounting keys (includes/account.lua): the new row is listed
--   and counted
-- ARGV[1] id
-- ARGV[2] namespace (the new row's fields 11..13)
-- ARGV[3] state row of the new job (ready, attempt 0, claims 0), built by the caller
-- ARGV[4] data row, then NUL and the org the row acts for when it has one (row.lua put_data)
-- ARGV[5] due score
-- ARGV[6] wake slot ("" when the job is not due at creation: no wake)
-- ARGV[7] queue (the wake hash field and the message)
-- ARGV[8] wake channel
-- enqueue() returns 1 when inserted; else the id of the row it dedupes to (ARGV[1] itself when
-- the id exists, live or finished; the live holder's id when the namespace is taken). Call it
-- once per script. ENQUEUE_QUIET is true after it when a due row went in without a PUBLISH, its
-- slot's having gone out already (the caller publishes once more at the slot's end).

local ENQUEUE_QUIET = false

local function enqueue()
  acc_open(#KEYS - 5)
  acc_fresh(KEYS[1])
  local id, ns = ARGV[1], ARGV[2]
  if redis.call("HEXISTS", KEYS[1], id) == 1 then
    return id
  end
  local holder = redis.call("HGET", KEYS[3], ns)
  if holder then
    return holder
  end
  redis.call("HSET", KEYS[1], id, ARGV[3])
  put_data(KEYS[2], id, ARGV[4])
  redis.call("HSET", KEYS[3], ns, id)
  redis.call("ZADD", KEYS[4], ARGV[5], id)
  -- accounting
  count_new(id, ARGV[4], ARGV[7])
  acc_close()
  -- At most one PUBLISH per queue per wake slot: the poll is the guarantee, the wake a shortcut.
  local slot = ARGV[6]
  if slot ~= "" then
    if redis.call("HGET", KEYS[5], ARGV[7]) ~= slot then
      redis.call("HSET", KEYS[5], ARGV[7], slot)
      redis.call("PUBLISH", ARGV[8], ARGV[7])
    else
      ENQUEUE_QUIET = true
    end
  end
  return 1
end

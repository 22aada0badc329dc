-- join_enqueue — for each item in order, atomically: refuse it when a dependency names no row,
-- else enqueue its job as job_enqueue does (dedupe by id, then by live namespace) and, when
-- inserted, give the row its join counted from its dependencies' states now (includes/flows.lua):
-- `parked` with no run_at while any is live (each live one gets an edge), else `ready` at the
-- job's run_at. A later item sees what an earlier one wrote.
--
-- KEYS[1] job:state   KEYS[2] job:data   KEYS[3] job:live   KEYS[4] wake   (see job_enqueue)
-- KEYS[5] join:waiters   KEYS[6] join:pending (includes/flows.lua)
-- KEYS[6 + q] due:<queue q> for each distinct queue q = 1..m of the items
-- KEYS[#KEYS - 5 .. #KEYS] the accounting keys (includes/account.lua): new rows are listed and
--   counted
-- ARGV[1] m, then per queue q: ARGV[2q] its name, ARGV[2q + 1] its wake channel
-- then per item: id, namespace, state row (ready, attempt 0, claims 0, with the flow fields:
--   includes/flows.lua), data row, due score, wake slot ("" when not due at creation), queue
--   index q, join policy, k, then its k dependency ids (distinct)
-- Returns a list, per item: "+" inserted, "=" .. id deduped to that id (nothing more written),
-- or "?" followed by the dependency ids naming no row, NUL-joined (nothing written).
--!include row.lua
--!include account.lua
--!include flows.lua

acc_open(#KEYS - 5)
acc_fresh(KEYS[1])
local m = tonumber(ARGV[1])
local at = 2 + 2 * m
local out = {}
while at <= #ARGV do
  local id, ns, state, data = ARGV[at], ARGV[at + 1], ARGV[at + 2], ARGV[at + 3]
  local score, slot, q, policy = ARGV[at + 4], ARGV[at + 5], tonumber(ARGV[at + 6]), ARGV[at + 7]
  local k = tonumber(ARGV[at + 8])
  local deps = {}
  for j = 1, k do
    deps[j] = ARGV[at + 8 + j]
  end
  at = at + 9 + k
  local missing = {}
  for _, d in ipairs(deps) do
    if redis.call("HEXISTS", KEYS[1], d) == 0 then
      missing[#missing + 1] = d
    end
  end
  if #missing > 0 then
    out[#out + 1] = "?" .. table.concat(missing, Z)
  elseif redis.call("HEXISTS", KEYS[1], id) == 1 then
    out[#out + 1] = "=" .. id
  else
    local holder = redis.call("HGET", KEYS[3], ns)
    if holder then
      out[#out + 1] = "=" .. holder
    else
      local t = split(state)
      flow_row(t)
      local pending, failed, _, live = flow_count(id, t, deps)
      t[14] = join_format(#deps, pending, failed, policy)
      local queue = ARGV[2 * q]
      if pending > 0 then
        t[1] = "parked"
        t[6] = ""
      else
        redis.call("ZADD", KEYS[6 + q], score, id)
      end
      redis.call("HSET", KEYS[1], id, join(t))
      put_data(KEYS[2], id, data)
      redis.call("HSET", KEYS[3], ns, id)
      flow_edges(id, t, live)
      count_new(id, data, queue)
      -- At most one PUBLISH per queue per wake slot, as job_enqueue.
      if pending == 0 and slot ~= "" and redis.call("HGET", KEYS[4], queue) ~= slot then
        redis.call("HSET", KEYS[4], queue, slot)
        redis.call("PUBLISH", ARGV[2 * q + 1], queue)
      end
      out[#out + 1] = "+"
    end
  end
end
acc_close()
return out

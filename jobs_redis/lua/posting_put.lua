-- posting_put — post a balanced set of lines once under (tenant, key), fenced on the claim of the
-- job whose idempotency key is that key.
--
-- KEYS[1] job:state   KEYS[2] posting   KEYS[3] balance   (includes/posting.lua)
-- ARGV[1] the fence's job id   ARGV[2] claims NUL worker NUL (the fence)   ARGV[3] tenant ("" for
-- the cross-tenant ledger)   ARGV[4] key   ARGV[5] lines_json   ARGV[6] now_ms
-- ARGV[7..] the lines, three ARGV each: account, currency, amount (decimal text, "-" a credit),
-- by account then currency.
-- In order: the fence does not hold, or its row's idempotency key (row field 13) is not ARGV[4]
-- -> {"fence_lost"}, nothing read or written; the key holds a posting -> {"already_applied",
-- raw} when its lines_json is ARGV[5] byte for byte, else {"conflict", raw}, nothing written;
-- else the posting is stored and each line added to its account's sums -> {"applied"}.
--!include row.lua
--!include decimal.lua
--!include posting.lua

local row = held_item(KEYS[1], ARGV[1], ARGV[2])
if not row or row[13] ~= ARGV[4] then
  return { "fence_lost" }
end
local field = posting_field(ARGV[3], ARGV[4])
local raw = redis.call("HGET", KEYS[2], field)
if raw then
  local stored = split(raw)
  if stored[3] == ARGV[5] then
    return { "already_applied", raw }
  end
  return { "conflict", raw }
end
redis.call("HSET", KEYS[2], field, ARGV[1] .. Z .. ARGV[6] .. Z .. ARGV[5])
-- Lines come grouped by account: each account's sums are read and written once.
local account, sums = nil, nil
for i = 7, #ARGV, 3 do
  if ARGV[i] ~= account then
    if account then
      redis.call("HSET", KEYS[3], ARGV[3] .. Z .. account, join(sums))
    end
    account = ARGV[i]
    local held = redis.call("HGET", KEYS[3], ARGV[3] .. Z .. account)
    sums = held and split(held) or {}
  end
  balance_add(sums, ARGV[i + 1], ARGV[i + 2])
end
redis.call("HSET", KEYS[3], ARGV[3] .. Z .. account, join(sums))
return { "applied" }

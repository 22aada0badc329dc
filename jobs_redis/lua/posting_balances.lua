-- posting_balances — the sums of some accounts of one tenant's ledger.
--
-- KEYS[1] balance   (includes/posting.lua)
-- ARGV[1] tenant ("" for the cross-tenant ledger)   ARGV[2..] the accounts (distinct)
-- Returns, per account that holds sums, its name then its raw fields (`currency NUL debits NUL
-- credits`, repeated): a flat list of pairs.
--!include row.lua

local out = {}
for i = 2, #ARGV do
  local raw = redis.call("HGET", KEYS[1], ARGV[1] .. Z .. ARGV[i])
  if raw then
    out[#out + 1] = ARGV[i]
    out[#out + 1] = raw
  end
end
return out

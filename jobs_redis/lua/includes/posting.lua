-- includes/posting.lua — the posting ledger's codec (inlined after row.lua and decimal.lua, never
-- run alone). Keys (hash tag `{p}` shared with every other key; jobs_redis.keys.Keys):
--   {p}:posting  hash `tenant NUL key` -> `job_id NUL posted_at_ms NUL lines_json`: one posting
--                per (tenant, key); tenant "" is the cross-tenant ledger (an org id is never
--                empty, and neither a tenant nor a key holds a NUL). `lines_json` is the lines as
--                the driver spells them (compact, by account and currency): a repeat is told from
--                a conflict by comparing it byte for byte.
--   {p}:balance  hash `tenant NUL account` -> `currency NUL debits NUL credits`, repeated for each
--                currency the account was posted in; debits and credits are non-negative decimal
--                TEXT, moved with `dec_add` (exact at any size, never a Lua number).

local function posting_field(tenant, key)
  return tenant .. Z .. key
end

-- Add one line's `amount` (a Python int's decimal text, "-" first for a credit) to `t`, an
-- account's fields as `split` gives them (a new account: {}).
local function balance_add(t, currency, amount)
  local credit = string.sub(amount, 1, 1) == "-"
  local size = credit and string.sub(amount, 2) or amount
  for i = 1, #t, 3 do
    if t[i] == currency then
      if credit then
        t[i + 2] = dec_add(t[i + 2], size)
      else
        t[i + 1] = dec_add(t[i + 1], size)
      end
      return
    end
  end
  t[#t + 1] = currency
  t[#t + 1] = credit and "0" or size
  t[#t + 1] = credit and size or "0"
end

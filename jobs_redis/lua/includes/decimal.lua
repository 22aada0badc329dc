-- includes/decimal.lua — exact sums of decimal text (inlined by the loader, never run alone).
-- A count or an amount that may pass 2^53 is stored and moved as decimal TEXT, never as a Lua
-- number: a double is exact only below 2^53. Used by the sweep ledger's counts and the posting
-- ledger's balances.

-- The sum of two non-negative decimal texts, digit by digit: exact at any size.
local function dec_add(a, b)
  local out, carry = {}, 0
  local i, j = #a, #b
  while i > 0 or j > 0 or carry > 0 do
    local d = carry
    if i > 0 then
      d = d + string.byte(a, i) - 48
    end
    if j > 0 then
      d = d + string.byte(b, j) - 48
    end
    carry = 0
    if d >= 10 then
      d, carry = d - 10, 1
    end
    out[#out + 1] = string.char(48 + d)
    i, j = i - 1, j - 1
  end
  return string.reverse(table.concat(out))
end

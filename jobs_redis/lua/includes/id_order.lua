-- includes/id_order.lua — job ids ordered as the contract orders them (inlined by the loader,
-- never run alone): byte by byte, so UTF-8 byte order, which is code-point order. Lua's `<` on
-- strings follows the server's collation locale, which is not.

local function id_less(a, b)
  if a == b then
    return false
  end
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x < y
    end
  end
  return #a < #b
end

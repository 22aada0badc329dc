-- includes/consumer.lua — the consumer cursors' codec and index (inlined after row.lua and
-- decimal.lua, never run alone). Keys (hash tag `{p}` shared with every other key):
--   {p}:consumer        hash `name NUL tenant` ("" for a cross-tenant consumer) -> the entry:
--                       8 NUL-joined fields, named below (lag "" is None; no other field is
--                       empty: source and ids are names, the cursor is JSON text, counts digits)
--   {p}:consumer:names  zset, every score 0, the same members: the listing's order is its lex
--                       order (name, then tenant, "" first: no name holds NUL)
-- Counts (turns, records) are stored and moved as decimal TEXT (`dec_add`, decimal.lua): exact at
-- any size.

local C_SOURCE, C_CURSOR, C_TURNS, C_RECORDS, C_LAG, C_HOLDER, C_JOB, C_UPDATED =
  1, 2, 3, 4, 5, 6, 7, 8

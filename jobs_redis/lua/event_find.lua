-- event_find — the oldest unexpired event a wait meets (read only).
--
-- KEYS[1] event   KEYS[2] event:name   (includes/durable.lua describes them)
-- ARGV[1] event name   ARGV[2] since_ms   ARGV[3] until_ms ("" for no end)   ARGV[4] the wait's
-- tenant ("" for none)   ARGV[5] now_ms   ARGV[6] the match's lines
-- Returns, for the event with the least (published_at_ms, id) named ARGV[1], published in
-- [since_ms, until_ms), for the tenant or every tenant, with expires_at_ms > now_ms, whose data
-- the match takes: {id, published_at_ms, expires_at_ms, data_json, tenant, "1" for every
-- tenant else "0"}; else nil.
--!include row.lua
--!include match.lua
--!include durable.lua

local id, e = event_first(ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6])
if not id then
  return nil
end
return { id, e[2], e[3], e[5], e[6] or "", e[7] or "0" }

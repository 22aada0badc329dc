-- event_find — the oldest unexpired event a wait meets (read only).
--
-- KEYS[1] event   KEYS[2] event:name   (includes/durable.lua describes them)
-- ARGV[1] event name   ARGV[2] since_ms   ARGV[3] now_ms   ARGV[4] the match's lines
-- Returns, for the event with the least (published_at_ms, id) named ARGV[1], published at or
-- after since_ms, with expires_at_ms > now_ms, whose data the match takes:
-- {id, published_at_ms, expires_at_ms, data_json}; else nil.
--!include row.lua
--!include match.lua
--!include durable.lua

local id, e = event_first(ARGV[1], ARGV[2], ARGV[3], ARGV[4])
if not id then
  return nil
end
return { id, e[2], e[3], e[5] }

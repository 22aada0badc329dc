-- includes/match.lua — `jobs_core.semantics.event_matches` on match lines (inlined by the loader,
-- never run alone).
--
-- A wait's match and an event's data reach the scripts as *match lines*, computed by the driver
-- in Python (`jobs_redis.match`): one line per top-level key, `json(key) TAB canonical(value)`,
-- newline-joined, where two values share a canonical text exactly when `json_equal` holds. cjson
-- cannot decide that (it reads 1.0 as 1 and rounds big integers), text comparison can. A match
-- holds when every line of the match is a line of the data; a data value that is not an object
-- has no lines, so only an empty match (no lines) takes it.

local function event_matches(match_lines, data_lines)
  if match_lines == "" then
    return true
  end
  -- Lines hold no newline, so a line is one of the data's exactly when "\n" .. line .. "\n" is a
  -- substring of "\n" .. data .. "\n" (a plain find: no pattern characters).
  local data = "\n" .. data_lines .. "\n"
  local i = 1
  while true do
    local j = string.find(match_lines, "\n", i, true)
    local line = string.sub(match_lines, i, (j or 0) - 1)
    if not string.find(data, "\n" .. line .. "\n", 1, true) then
      return false
    end
    if not j then
      return true
    end
    i = j + 1
  end
end

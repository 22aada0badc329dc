-- migrate_webhooks — the webhook half of `migrate`: put attempts recorded before the age index
-- existed into it (`ujobs db upgrade`). Idempotent: an indexed attempt is left as it is.
--
-- KEYS[1] webhook:attempt   KEYS[2] webhook:attempt-age   (includes/webhook.lua)
-- ARGV: fields (a page of an HSCAN of webhook:attempt, read outside the script)
-- Each attempt is read here, atomically with its write: one purged since the page was read is
-- left alone, so the index never names a missing attempt.
-- Returns how many attempts were added to the index.
--!include row.lua

local added = 0
for _, key in ipairs(ARGV) do
  local raw = redis.call("HGET", KEYS[1], key)
  if raw then
    local a = split(raw)
    added = added + redis.call("ZADD", KEYS[2], "NX", a[9], key)
  end
end
return added

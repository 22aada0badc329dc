-- includes/webhook.lua — the webhook ledger's codec and indexes (inlined after row.lua, never run
-- alone). Keys (hash tag `{p}` shared with every other key; jobs_redis.keys.Keys):
--   {p}:webhook:endpoint   hash `tenant NUL endpoint` -> the endpoint: url NUL enabled ("1" or
--                          "0") NUL failures NUL disabled_at_ms NUL created_at_ms NUL
--                          updated_at_ms (an empty field is None). No tenant is spelled "": a
--                          tenant is never empty.
--   {p}:webhook:endpoints  zset, all scores 0, members `tenant NUL endpoint`: the listing's order
--                          (tenant, endpoint) in bytes, which for UTF-8 is code-point order
--   {p}:webhook:attempt    hash `job_id NUL claims (19 digits)` -> the attempt: tenant NUL
--                          endpoint NUL event_id NUL outcome NUL status_code NUL latency_ms NUL
--                          excerpt NUL error NUL at_ms (no stored text holds NUL: the ABC refuses
--                          one)
--   {p}:webhook:attempts   zset, all scores 0, members `tenant NUL endpoint NUL at_ms (13) NUL
--                          job_id NUL claims (19)`: one endpoint's attempts are one lex range,
--                          oldest first (ties by job id bytes, then claims)
--   {p}:webhook:attempt-age  zset, score at_ms, members `job_id NUL claims (19)` (the attempt's
--                          field): every attempt oldest first, ties by job id bytes then claims,
--                          what webhook_attempt_purge reads

local W_URL, W_ENABLED, W_FAILURES, W_DISABLED, W_CREATED, W_UPDATED = 1, 2, 3, 4, 5, 6

-- A decimal text as `width` digits, so lex order is numeric order. Text only.
local function pad(n, width)
  return string.rep("0", width - #n) .. n
end
